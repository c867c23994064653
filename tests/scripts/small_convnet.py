"""A plain Keras convnet on a slice of MNIST, as a user would write it (the shape of Keras's own
`mnist_convnet` example, smaller): fit with no callbacks, then evaluate with verbose=0.

    python small_convnet.py [--train-samples 6400] [--epochs 2]
    acceltrain run --simulate-devices 8 small_convnet.py
"""

import argparse

import keras
import numpy as np

from acceltrain.datasets import MNIST_PATH  # only where to find the file

parser = argparse.ArgumentParser()
parser.add_argument("--train-samples", type=int, default=6400)
parser.add_argument("--test-samples", type=int, default=2000)
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

with np.load(MNIST_PATH) as mnist:
    x_train = mnist["x_train"][: args.train_samples, ..., None].astype("float32") / 255
    y_train = mnist["y_train"][: args.train_samples]
    x_test = mnist["x_test"][: args.test_samples, ..., None].astype("float32") / 255
    y_test = mnist["y_test"][: args.test_samples]

keras.utils.set_random_seed(0)
model = keras.Sequential([
    keras.Input(shape=(28, 28, 1)),
    keras.layers.Conv2D(16, 3, activation="relu"),
    keras.layers.MaxPooling2D(2),
    keras.layers.Conv2D(32, 3, activation="relu"),
    keras.layers.MaxPooling2D(2),
    keras.layers.Flatten(),
    keras.layers.Dropout(0.5),
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x_train, y_train, batch_size=128, epochs=args.epochs, verbose=2)
loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
print(f"test accuracy: {accuracy:.4f}")
