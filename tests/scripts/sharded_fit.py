"""A plain Keras script, unchanged, for `acceltrain run --distribution fsdp`: prints its first kernel's layout."""

import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.random((256, 64), dtype=np.float32)
y = rng.integers(0, 4, 256)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(4)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=64, epochs=1, verbose=0)
print("kernel:", model.layers[0].kernel.value.sharding.spec)
