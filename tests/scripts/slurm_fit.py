"""A plain Keras script for the real-Slurm and real-Ray tests: a small classifier on fixed random data; each process
writes its final weights to OUT.RANK.npz (RANK: SLURM_PROCID, or a Ray job's worker rank), and prints the last
epoch's loss.

    python slurm_fit.py OUT [--epochs 6]

Each step sleeps a little (a callback), so that a test can requeue the job while it trains.
"""

import argparse
import os
import time

import keras
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--epochs", type=int, default=6)
args = parser.parse_args()

keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 16)).astype("float32")
y = (x[:, :4].argmax(axis=1) + (x[:, 4] > 0) * 4).astype("int64")  # 8 classes, learnable
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(8)])
model.compile(optimizer=keras.optimizers.Adam(1e-2),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])


class Slowly(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.03)


history = model.fit(x, y, batch_size=32, epochs=args.epochs, callbacks=[Slowly()], verbose=2)
print("final loss", history.history["loss"][-1], flush=True)
rank = os.environ.get("SLURM_PROCID") or os.environ.get("ACCELTRAIN_RAY_WORLD_RANK", "0")
np.savez(f"{args.out}.{rank}.npz", *model.get_weights())
