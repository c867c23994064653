"""keras.io's text classification from scratch, small: a TextVectorization layer adapted on raw strings, a model
trained on the vectorized dataset, then an end-to-end model (strings in, the layer inside) compiled and evaluated
on the raw string dataset. A script that sets TensorFlow itself.  python text_vectorization_strings.py"""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import json  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
good, bad, filler = ["great", "fine", "superb", "lovely"], ["awful", "boring", "bad", "dull"], ["the", "a", "film", "plot"]
labels = rng.integers(0, 2, 600)
texts = np.array([" ".join(rng.choice(filler, 6).tolist() + rng.choice(good if label else bad, 2).tolist())
                  for label in labels])
raw_train = tf.data.Dataset.from_tensor_slices((texts[:500], labels[:500])).batch(32)
raw_test = tf.data.Dataset.from_tensor_slices((texts[500:], labels[500:])).batch(32)

vectorize_layer = keras.layers.TextVectorization(max_tokens=50, output_mode="int", output_sequence_length=10)
vectorize_layer.adapt(raw_train.map(lambda text, label: text))
train = raw_train.map(lambda text, label: (vectorize_layer(text), label))

inputs = keras.Input(shape=(None,), dtype="int64")
hidden = keras.layers.Embedding(50, 8)(inputs)
hidden = keras.layers.GlobalMaxPooling1D()(keras.layers.Conv1D(8, 3, activation="relu")(hidden))
model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(hidden))
model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
history = model.fit(train, epochs=3, verbose=0)

strings = keras.Input(shape=(1,), dtype="string")
end_to_end = keras.Model(strings, model(vectorize_layer(strings)))
end_to_end.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
loss, accuracy = end_to_end.evaluate(raw_test, verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "eval_loss": loss, "eval_accuracy": accuracy}))
