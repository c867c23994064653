"""A plain Keras script that trains in small steady steps for a long while, printing "process P pid N at step S"
(P: ACCELTRAIN_PROCESS_ID) once, at step AT, so a test can act on a job that is known to be training: SIGSTOP one
process (a hang), or send a notice.

    steady_steps.py [--at 5] [--epochs 50] [--burn-ms 0]

--burn-ms: process 1 keeps its CPU busy this long after each step (a straggler: slower host work).
"""

import argparse
import os
import time

import keras
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--at", type=int, default=5)
parser.add_argument("--epochs", type=int, default=50)
parser.add_argument("--burn-ms", type=float, default=0.0)
args = parser.parse_args()

rng = np.random.default_rng(0)
x = rng.normal(size=(640, 8)).astype("float32")
y = (x[:, 0] > 0).astype("int32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class Says(keras.callbacks.Callback):
    steps = 0

    def on_train_batch_end(self, batch, logs=None):
        Says.steps += 1
        time.sleep(0.02)
        if args.burn_ms and os.environ.get("ACCELTRAIN_PROCESS_ID") == "1":
            until = time.process_time() + args.burn_ms / 1000
            while time.process_time() < until:
                pass
        if Says.steps == args.at:
            print(f"process {os.environ.get('ACCELTRAIN_PROCESS_ID', '0')} pid {os.getpid()} at step {args.at}",
                  flush=True)


model.fit(x, y, batch_size=32, epochs=args.epochs, callbacks=[Says()], verbose=0)
print("finished", flush=True)
