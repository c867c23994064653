"""Augmentation inside the model, as Keras's vision examples write it: RandomFlip, RandomZoom and RandomCrop as
the model's first layers (active in training only), a small convnet after them, then evaluate.
python in_model_augmentation.py MNIST.npz"""

import json
import sys

import keras
import numpy as np

keras.utils.set_random_seed(0)
with np.load(sys.argv[1]) as data:
    x_train, y_train = data["x_train"][:1024], data["y_train"][:1024]
    x_test, y_test = data["x_test"][:256], data["y_test"][:256]
x_train = np.expand_dims(x_train.astype("float32") / 255, -1)
x_test = np.expand_dims(x_test.astype("float32") / 255, -1)

augmentation = keras.Sequential([
    keras.layers.RandomFlip("horizontal"),
    keras.layers.RandomZoom(0.1),
    keras.layers.RandomCrop(24, 24),
], name="augmentation")
model = keras.Sequential([
    keras.Input(shape=(28, 28, 1)),
    augmentation,
    keras.layers.Conv2D(16, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Conv2D(32, 3, activation="relu"),
    keras.layers.GlobalAveragePooling2D(),  # RandomCrop passes 28x28 images through outside training
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=64, epochs=2, verbose=2)
loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "test_loss": loss, "test_accuracy": accuracy}))
