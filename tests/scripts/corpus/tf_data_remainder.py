"""tf.data whose last batch divides over no device count (1,003 samples in batches of 64: 43 left), `class_weight`
on the dataset, a validation dataset with a remainder too (250: 58 left), then evaluate on a dataset, predict on a
tf.Tensor and on a dataset (what the EEG and class-weight examples of keras.io do)."""

import json

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1253, 12)).astype("float32")
y = (x[:, :3].sum(1) > 0.8).astype("int32")  # imbalanced: about a quarter positive
train = tf.data.Dataset.from_tensor_slices((x[:1003], y[:1003])).shuffle(1003, seed=0).batch(64)
validation = tf.data.Dataset.from_tensor_slices((x[1003:], y[1003:])).batch(64)

model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(2, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(train, epochs=2, validation_data=validation, class_weight={0: 1.0, 1: 3.0}, verbose=0)
loss, accuracy = model.evaluate(validation, verbose=0)
from_tensor = model.predict(tf.constant(x[1003:]), verbose=0)
from_dataset = model.predict(validation.map(lambda features, label: features), verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "val_loss": history.history["val_loss"][-1],
                              "eval_loss": loss, "eval_accuracy": accuracy, "predicted": list(from_tensor.shape),
                              "predicted_mean": float(from_tensor[:, 1].mean()),
                              "same_predictions": bool(np.allclose(from_tensor, from_dataset, atol=1e-5))}))
