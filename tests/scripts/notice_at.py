"""A plain Keras script (no acceltrain in it) for the notice tests: a small classifier with validation data, then an
evaluate and some work after fit. Under `acceltrain launch`, process 1 sends SIGTERM to the launcher (which passes
it to every process, as an engine's notice reaches every pod) at MOMENT, once, and prints where it did:

    python notice_at.py OUT MOMENT      (MOMENT: compile, validation, evaluate, after-fit or none)

- compile: at the run's first batch, before its first step is compiled;
- validation: at the second batch of the second epoch's validation pass, inside fit (whose batches then take 1 s
  each, each said: "validation batch 3");
- evaluate: at the second batch of the evaluate after fit (whose batches then take 1 s each, each said);
- after-fit: after fit and evaluate, before a minute of the script's own work (which a notice must not wait for).

Each process writes its final weights to OUT.RANK.npz and prints the last epoch's loss.
"""

import os
import signal
import sys
import time

import keras
import numpy as np

out, moment = sys.argv[1], sys.argv[2]
rank = os.environ.get("ACCELTRAIN_PROCESS_ID", "0")
launcher = os.environ.get("ACCELTRAIN_LAUNCHER_PID")


def notice(where: str) -> None:
    if moment == where and rank == "1" and launcher:
        print(f"notice sent at {where}", flush=True)
        os.kill(int(launcher), signal.SIGTERM)


keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 16)).astype("float32")
y = (x[:, :4].argmax(axis=1) + (x[:, 4] > 0) * 4).astype("int64")  # 8 classes, learnable
x_val, y_val = x[:256] + 0.1, y[:256]
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(8)])
model.compile(optimizer=keras.optimizers.Adam(1e-2),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])


class Moments(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.epoch == 0 and batch == 0:
            notice("compile")

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.03)  # steps long enough for a notice to find the run training

    def on_test_batch_begin(self, batch, logs=None):
        if self.epoch == 1 and batch == 1:
            notice("validation")
        if self.epoch == 1 and batch >= 1 and moment == "validation":
            print(f"validation batch {batch}", flush=True)
            time.sleep(1)  # a pass long enough (8 s) for the job to agree on the notice inside it
        time.sleep(0.05)


class InEvaluate(keras.callbacks.Callback):
    def on_test_batch_begin(self, batch, logs=None):
        if batch == 1:
            notice("evaluate")
        if batch >= 1 and moment == "evaluate":
            print(f"evaluate batch {batch}", flush=True)
            time.sleep(1)  # an evaluate long enough (8 s) for the job to agree on the notice inside it
        time.sleep(0.05)


history = model.fit(x, y, batch_size=32, epochs=3, validation_data=(x_val, y_val), callbacks=[Moments()], verbose=2)
print("final loss", history.history["loss"][-1], flush=True)
print("evaluated", model.evaluate(x_val, y_val, batch_size=32, callbacks=[InEvaluate()], verbose=0), flush=True)
notice("after-fit")
if moment == "after-fit" and launcher:
    for _ in range(60):  # a minute of the script's own work, after fit
        time.sleep(1)
np.savez(f"{out}.{rank}.npz", *model.get_weights())
print("done", flush=True)
