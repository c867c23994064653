"""One process of a job stops moving while the other waits for it in a collective: the stall watchdog must
end the job and show where each process stood, whatever the script compiles and feeds.

    one_process_stuck.py [SHAPE]

SHAPE: sgd (the default: no metric), adam_accuracy, callback, tf_data, custom_train_step: process 1 never
reaches fit. evaluate: both fit, then process 1 never reaches evaluate. mid_fit: process 1 stops in a
callback after 3 steps of epoch 2 (the bound that follows the step time names it). gil_held: run alone, a
callback holds the GIL (only faulthandler's backstop can speak).

Each call of the process that waits prints "waiting in CALL at T" (time.time()) first.
"""

import os
import sys
import time

import keras
import numpy as np

SHAPE = sys.argv[1] if len(sys.argv) > 1 else "sgd"
STUCK = os.environ.get("ACCELTRAIN_PROCESS_ID", "1") == "1"  # process 1 of a launched job; run's only process


def stuck_here():
    if SHAPE == "gil_held":
        import ctypes

        ctypes.PyDLL(None).sleep(3600)  # the stuck line, holding the GIL (PyDLL does not release it)
    time.sleep(3600)  # the stuck line


class OwnTrainStep(keras.Sequential):
    def train_step(self, *args, **kwargs):  # a script's own train_step, around Keras's
        return super().train_step(*args, **kwargs)


class StopsInEpoch2(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if STUCK and self.epoch == 1 and batch == 2:
            stuck_here()

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch


rng = np.random.default_rng(0)
x = rng.random((512, 8), dtype=np.float32)
y = (x.sum(axis=1) > 4).astype("int32")
model = (OwnTrainStep if SHAPE == "custom_train_step" else keras.Sequential)(
    [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2, activation="softmax")])
if SHAPE == "sgd":
    model.compile("sgd", "sparse_categorical_crossentropy")
else:
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
inputs = {"x": x, "y": y, "batch_size": 64}
if SHAPE == "tf_data":
    import tensorflow as tf

    inputs = {"x": tf.data.Dataset.from_tensor_slices((x, y)).shuffle(512, seed=0).batch(64)}
callbacks = {"callback": [keras.callbacks.EarlyStopping(monitor="loss", patience=2),
                          keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: None)],
             "mid_fit": [StopsInEpoch2()], "gil_held": [StopsInEpoch2()]}.get(SHAPE, [])
epochs = 3 if SHAPE in ("mid_fit", "gil_held") else 2

if SHAPE == "evaluate":
    model.fit(**inputs, epochs=1, verbose=0)
    if STUCK:
        stuck_here()
    print(f"waiting in evaluate at {time.time()}", flush=True)
    model.evaluate(x, y, batch_size=64, verbose=0)  # process 0 waits here
else:
    if STUCK and SHAPE not in ("mid_fit", "gil_held"):
        stuck_here()
    print(f"waiting in fit at {time.time()}", flush=True)
    model.fit(**inputs, epochs=epochs, verbose=0, callbacks=callbacks)  # process 0 waits here
print("unreachable: the call finished without process 1", flush=True)
