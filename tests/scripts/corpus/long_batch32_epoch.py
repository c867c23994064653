"""Many small steps: a functional residual MLP trained with batch_size=32 for 300 steps an epoch (9,600 samples),
as tutorials train on tabular data.  python long_batch32_epoch.py"""

import json

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.random((9600, 64), dtype=np.float32)
y = (x[:, :10].argmax(axis=1) + (x[:, 10] > 0.5)) % 10  # learnable: a function of the inputs

inputs = keras.Input(shape=(64,))
hidden = keras.layers.Dense(64, activation="relu")(inputs)
hidden = keras.layers.Add()([hidden, keras.layers.Dense(64, activation="relu")(hidden)])
model = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(hidden))
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x, y, batch_size=32, epochs=1, verbose=2)
loss, accuracy = model.evaluate(x[:1024], y[:1024], batch_size=256, verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "test_loss": loss, "test_accuracy": accuracy}))
