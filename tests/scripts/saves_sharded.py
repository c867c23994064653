"""A plain script that saves a model: under `acceltrain launch --distribution fsdp` its weights are split over
the processes' devices, which Keras's save cannot write from one host."""

import sys
from pathlib import Path

import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.random((256, 64), dtype=np.float32)
y = rng.integers(0, 4, 256)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(4)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=64, epochs=1, verbose=0)
kernel = model.layers[0].kernel.value
print("kernel split over processes:", not (kernel.is_fully_addressable or kernel.is_fully_replicated), flush=True)
model.save(Path(sys.argv[1]) / "m.keras")
