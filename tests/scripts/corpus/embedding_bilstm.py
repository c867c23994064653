"""Text classification with an Embedding and a Bidirectional LSTM, as keras.io's bidirectional LSTM example
(IMDB there; synthetic token sequences here, nothing to download): fit with validation data, evaluate.
python embedding_bilstm.py"""

import json

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
vocabulary, length = 200, 20
x = rng.integers(1, vocabulary, size=(640, length)).astype("int32")
y = (np.isin(x, np.arange(1, 20)).sum(axis=1) >= 2).astype("int32")  # positive: two or more of the first tokens
x_train, y_train, x_val, y_val = x[:512], y[:512], x[512:], y[512:]

inputs = keras.Input(shape=(None,), dtype="int32")
embedded = keras.layers.Embedding(vocabulary, 16)(inputs)
encoded = keras.layers.Bidirectional(keras.layers.LSTM(16))(embedded)
model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(encoded))
model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=32, epochs=2, validation_data=(x_val, y_val), verbose=0)
loss, accuracy = model.evaluate(x_val, y_val, verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "val_loss": history.history["val_loss"][-1],
                              "test_loss": loss, "test_accuracy": accuracy}))
