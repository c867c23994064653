"""A plain Keras MNIST script, written for neither acceltrain nor TPUs.

    python plain_mnist.py [mnist.npz] [--epochs 2] [--train-samples 60000] [--batch-size 256]
    acceltrain run --simulate-devices 8 plain_mnist.py        # the same file, on 8 devices
    acceltrain launch --processes 2 --simulate-devices 2 plain_mnist.py

Nothing in it knows about devices or processes: acceltrain distributes it from the outside.
"""

import argparse

import keras
import numpy as np


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("data", nargs="?", help="mnist.npz in the keras.datasets layout (default: acceltrain's copy)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--train-samples", type=int, default=60000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", help="write the trained model here (.keras)")
    args = parser.parse_args()

    path = args.data
    if path is None:
        from acceltrain.datasets import MNIST_PATH  # only where to find the file; any copy of mnist.npz will do

        path = MNIST_PATH
    with np.load(path) as mnist:
        x_train, y_train = mnist["x_train"][: args.train_samples], mnist["y_train"][: args.train_samples]
        x_test, y_test = mnist["x_test"], mnist["y_test"]
    x_train = x_train.reshape(len(x_train), 784).astype("float32") / 255
    x_test = x_test.reshape(len(x_test), 784).astype("float32") / 255

    keras.utils.set_random_seed(args.seed)
    model = keras.Sequential([
        keras.Input(shape=(784,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, verbose=2)
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=1000, verbose=0)
    print(f"test accuracy: {accuracy:.4f}")
    if args.save:
        model.save(args.save)


if __name__ == "__main__":
    main()
