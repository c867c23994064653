"""The seed's own script shape, unmodified: fit with steps_per_epoch and no batch size, then
`loss, acc = model.evaluate(x_test, y_test, verbose=0)`, then save_weights. Under `acceltrain launch
--processes 2` this once hung for ever in evaluate (issue 10)."""

import sys

import keras
import numpy as np

from acceltrain.datasets import MNIST_PATH  # only where to find the file

with np.load(MNIST_PATH) as mnist:
    x_train, y_train = mnist["x_train"][:6000].reshape(-1, 784) / 255, mnist["y_train"][:6000]
    x_test, y_test = mnist["x_test"][:1000].reshape(-1, 784) / 255, mnist["y_test"][:1000]

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="rmsprop", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x_train, y_train, epochs=3, steps_per_epoch=50)
loss, acc = model.evaluate(x_test, y_test, verbose=0)
print(f"test accuracy: {acc:.4f}")
model.save_weights(sys.argv[1] if len(sys.argv) > 1 else "seed_shape.weights.h5")
