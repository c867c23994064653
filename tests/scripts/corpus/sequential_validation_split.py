"""A small Sequential convnet on MNIST, as in Keras's mnist_convnet example: fit with validation_split,
then evaluate.  python sequential_validation_split.py MNIST.npz"""

import json
import sys

import keras
import numpy as np

keras.utils.set_random_seed(0)
with np.load(sys.argv[1]) as data:
    x_train, y_train = data["x_train"][:1600], data["y_train"][:1600]
    x_test, y_test = data["x_test"][:400], data["y_test"][:400]
x_train = np.expand_dims(x_train.astype("float32") / 255, -1)
x_test = np.expand_dims(x_test.astype("float32") / 255, -1)
y_train, y_test = keras.utils.to_categorical(y_train, 10), keras.utils.to_categorical(y_test, 10)

model = keras.Sequential([
    keras.Input(shape=(28, 28, 1)),
    keras.layers.Conv2D(8, kernel_size=(3, 3), activation="relu"),
    keras.layers.MaxPooling2D(pool_size=(2, 2)),
    keras.layers.Conv2D(16, kernel_size=(3, 3), activation="relu"),
    keras.layers.MaxPooling2D(pool_size=(2, 2)),
    keras.layers.Flatten(),
    keras.layers.Dropout(0.5),
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=128, epochs=2, validation_split=0.1, verbose=2)
score = model.evaluate(x_test, y_test, verbose=0)
print("metrics:", json.dumps({"val_loss": history.history["val_loss"][-1], "test_loss": score[0],
                              "test_accuracy": score[1]}))
