"""Process 1 never reaches fit (stuck in its own code), so process 0 waits in fit's first collective:
the stall watchdog must end the job and show where process 1 stood."""

import os
import time

import keras
import numpy as np

x = np.random.default_rng(0).random((512, 8), dtype=np.float32)
y = (x.sum(axis=1) > 4).astype("int32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, activation="softmax")])
model.compile("sgd", "sparse_categorical_crossentropy")
if os.environ.get("ACCELTRAIN_PROCESS_ID") == "1":
    time.sleep(3600)  # the stuck line
print("entering fit", flush=True)
model.fit(x, y, batch_size=64, epochs=2, verbose=0)
print("unreachable: fit finished without process 1", flush=True)
