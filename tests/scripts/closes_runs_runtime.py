"""A script that connects itself, with `acceltrain run --simulate-devices 2`'s options, closes its runtime, then
fits: under run, connect() gives back run's runtime, and close() gives back only the script's hold on it."""

import numpy as np

import acceltrain

runtime = acceltrain.connect(simulate_devices=2)
runtime.close()

import keras  # noqa: E402

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
model.compile("sgd", "mse")
model.fit(np.zeros((16, 4), "float32"), np.zeros((16, 2), "float32"), batch_size=8, verbose=0)
print("replicas:", len(model.layers[0].kernel.value.sharding.device_set))
