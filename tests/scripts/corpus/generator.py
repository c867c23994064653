"""A Python generator that yields batches for ever, with steps_per_epoch (the Keras 2 fit_generator shape,
now plain fit), then evaluate on arrays."""

import json

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 10)).astype("float32")
y = (x @ np.linspace(-1, 1, 10)).astype("float32")[:, None]


def batches(batch_size=64):
    order = np.random.default_rng(1)
    while True:
        picked = order.integers(0, len(x), batch_size)
        yield x[picked], y[picked]


model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse", metrics=["mae"])
history = model.fit(batches(), steps_per_epoch=16, epochs=2, verbose=0)
loss, mae = model.evaluate(x[:256], y[:256], batch_size=64, verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "eval_loss": loss, "eval_mae": mae}))
