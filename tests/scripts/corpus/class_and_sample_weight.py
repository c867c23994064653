"""Imbalanced classes: fit with class_weight, then a second fit with per-sample weights, then a weighted
evaluate. Synthetic data, one class in ten."""

import json

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 12)).astype("float32")
y = (x[:, 0] + 0.5 * x[:, 1] > 1.3).astype("int32")  # about one sample in ten is positive
sample_weight = np.where(y == 1, 5.0, 1.0).astype("float32")

model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(1, activation="sigmoid")])
model.compile("adam", "binary_crossentropy", metrics=["accuracy", keras.metrics.Recall(name="recall")])
first = model.fit(x, y, epochs=1, batch_size=64, class_weight={0: 1.0, 1: 5.0}, verbose=0)
second = model.fit(x, y, epochs=1, batch_size=64, sample_weight=sample_weight, verbose=0)
results = model.evaluate(x[:512], y[:512], sample_weight=sample_weight[:512], verbose=0, return_dict=True)
print("metrics:", json.dumps({"class_weighted_loss": first.history["loss"][-1],
                              "sample_weighted_loss": second.history["loss"][-1],
                              "eval_loss": results["loss"], "eval_recall": results["recall"]}))
