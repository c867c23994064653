"""A tf.data input pipeline: from_tensor_slices, shuffle, map (normalise), batch, prefetch, for training
and validation, then evaluate on a dataset.  python tf_data_pipeline.py MNIST.npz"""

import json
import sys

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
with np.load(sys.argv[1]) as data:
    x_train, y_train = data["x_train"][:1024], data["y_train"][:1024]
    x_test, y_test = data["x_test"][:256], data["y_test"][:256]


def normalise(image, label):
    return tf.reshape(tf.cast(image, tf.float32) / 255.0, (784,)), label


train = (tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1024, seed=0)
         .map(normalise, num_parallel_calls=tf.data.AUTOTUNE).batch(64).prefetch(tf.data.AUTOTUNE))
test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).map(normalise).batch(64).prefetch(tf.data.AUTOTUNE)

model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(train, epochs=2, validation_data=test, verbose=0)
loss, accuracy = model.evaluate(test, verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "val_loss": history.history["val_loss"][-1],
                              "test_loss": loss, "test_accuracy": accuracy}))
