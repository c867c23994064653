"""Trains, then process 1 dies (SIGKILL, as an OOM kill or a lost host would) while process 0 trains on:
process 0's next step waits for process 1 in a collective that never comes."""

import os
import signal
import sys

import keras
import numpy as np

x = np.random.default_rng(0).random((512, 8), dtype=np.float32)
y = (x.sum(axis=1) > 4).astype("int32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, activation="softmax")])
model.compile("sgd", "sparse_categorical_crossentropy")
model.fit(x, y, batch_size=64, epochs=1, verbose=0)
print("trained one epoch", flush=True)
if os.environ.get("ACCELTRAIN_PROCESS_ID") == "1":
    os.kill(os.getpid(), signal.SIGKILL)
model.fit(x, y, batch_size=64, epochs=100_000, verbose=0)
sys.exit("unreachable: process 0 trained on without process 1")
