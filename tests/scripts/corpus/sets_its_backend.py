"""A script that chooses its Keras backend itself, before importing Keras, as many keras.io examples begin:
os.environ["KERAS_BACKEND"] = "tensorflow". A small classifier, fit and evaluate.  python sets_its_backend.py"""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import json  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 10)).astype("float32")
y = (x[:, :3].sum(axis=1) > 0).astype("int32")

model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy", metrics=["accuracy"])
history = model.fit(x, y, batch_size=64, epochs=10, verbose=0)
loss, accuracy = model.evaluate(x[:256], y[:256], verbose=0)
print("backend:", keras.backend.backend())
print("metrics:", json.dumps({"accuracy": history.history["accuracy"][-1], "test_loss": loss,
                              "test_accuracy": accuracy}))
