"""Trains, then process 1's script raises (as a script's own bug would) while process 0 goes on to
evaluate, a collective process 1 never joins: the job must end, with process 1's error shown."""

import os

import keras
import numpy as np

print(f"ready {os.getpid()}", flush=True)
x = np.random.default_rng(0).random((512, 8), dtype=np.float32)
y = (x.sum(axis=1) > 4).astype("int32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, activation="softmax")])
model.compile("sgd", "sparse_categorical_crossentropy")
model.fit(x, y, batch_size=64, epochs=1, verbose=0)
print("trained one epoch", flush=True)
if os.environ.get("ACCELTRAIN_PROCESS_ID") == "1":
    raise RuntimeError("process 1's script failed after fit")
model.evaluate(x, y, batch_size=64, verbose=0)
print("unreachable: process 0 evaluated without process 1", flush=True)
