"""A plain Keras script with small batches and many steps: a functional residual MLP, batch 32, 1,500 steps an
epoch (48,000 random samples, so nothing is downloaded). Prints each epoch's seconds.

    python long_batch32.py [--epochs 2] [--samples 48000]
    acceltrain run --simulate-devices 4 long_batch32.py
"""

import argparse
import time

import keras
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--samples", type=int, default=48_000)
args = parser.parse_args()

rng = np.random.default_rng(0)
x = rng.random((args.samples, 64), dtype=np.float32)
y = (x[:, :10].argmax(axis=1) + (x[:, 10] > 0.5)) % 10  # learnable: a function of the inputs

keras.utils.set_random_seed(0)
inputs = keras.Input(shape=(64,))
hidden = keras.layers.Dense(128, activation="relu")(inputs)
hidden = keras.layers.Add()([hidden, keras.layers.Dense(128, activation="relu")(hidden)])
model = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(hidden))
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])


class EpochSeconds(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch seconds: {time.perf_counter() - self.started:.3f}", flush=True)


model.fit(x, y, batch_size=32, epochs=args.epochs, verbose=2, callbacks=[EpochSeconds()])
