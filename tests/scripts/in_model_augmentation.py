"""A plain Keras convnet with its augmentation inside the model, as vision examples write it: RandomCrop (or
RandomZoom) as the model's first layer, which Keras marks as not compilable, so it runs the step op by op.
`--layer lookup`: a table looked up in numpy instead, as StringLookup/IntegerLookup/Hashing look theirs up outside
the backend (`supports_jit = False`): no compiler takes it. `--eager`: compile(run_eagerly=True) as well.

    python in_model_augmentation.py [--layer crop|zoom|lookup] [--eager] [--train-samples 1280] [--epochs 2]
    acceltrain run --simulate-devices 4 in_model_augmentation.py
"""

import argparse

import jax
import keras
import numpy as np

from acceltrain.datasets import MNIST_PATH  # only where to find the file

parser = argparse.ArgumentParser()
parser.add_argument("--layer", choices=["crop", "zoom", "lookup"], default="crop")
parser.add_argument("--eager", action="store_true")
parser.add_argument("--train-samples", type=int, default=1280)
parser.add_argument("--test-samples", type=int, default=512)
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

with np.load(MNIST_PATH) as mnist:
    x_train = mnist["x_train"][: args.train_samples, ..., None].astype("float32") / 255
    y_train = mnist["y_train"][: args.train_samples]
    x_test = mnist["x_test"][: args.test_samples, ..., None].astype("float32") / 255
    y_test = mnist["y_test"][: args.test_samples]



class GammaLookup(keras.layers.Layer):
    """Each pixel's value looked up in a table, in numpy: eager only, as Keras's lookup layers are on JAX."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_jit = False
        self.table = (np.arange(256) / 255) ** 0.8

    def call(self, images):
        if isinstance(images, jax.core.Tracer):  # Keras's build traces the model for its shapes only
            return images
        indices = np.clip(np.asarray(keras.ops.convert_to_numpy(images)) * 255, 0, 255).astype("int64")
        return keras.ops.convert_to_tensor(self.table[indices].astype("float32"))

    def compute_output_shape(self, input_shape):
        return input_shape


keras.utils.set_random_seed(0)
augment = {"crop": lambda: keras.layers.RandomCrop(24, 24), "zoom": lambda: keras.layers.RandomZoom(0.1),
           "lookup": GammaLookup}[args.layer]()
model = keras.Sequential([
    keras.Input(shape=(28, 28, 1)),
    augment,
    keras.layers.Conv2D(32, 3, activation="relu"),
    keras.layers.MaxPooling2D(2),
    keras.layers.Conv2D(64, 3, activation="relu"),
    keras.layers.MaxPooling2D(2),  # a third convolution over pooled features: with two, it sat at chance (12.7 %)
    keras.layers.Conv2D(64, 3, activation="relu"),
    keras.layers.GlobalAveragePooling2D(),  # RandomCrop passes 28x28 images through at inference (Keras 3.15)
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"],
              run_eagerly=args.eager)
model.fit(x_train, y_train, batch_size=32, epochs=args.epochs, verbose=2)
loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
print(f"test accuracy: {accuracy:.4f}")
