"""A TensorFlow script whose tf.data pipeline augments with Keras (keras.random inside a dataset's map), as
keras.io's image classification examples do: os.environ["KERAS_BACKEND"] = "tensorflow", a Sequential of
RandomFlip/RandomTranslation and an unseeded keras.random.normal noise mapped over the training set, a small
convnet, fit and evaluate.
python tf_random_in_data_map.py"""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import json  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 12, 12, 1)).astype("float32")
y = (x[:, :6].mean(axis=(1, 2, 3)) > 0).astype("int32")

augment = keras.Sequential([keras.layers.RandomFlip("vertical", seed=1),
                            keras.layers.RandomTranslation(0.1, 0.1, seed=2)])
train = (tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
         .map(lambda images, labels: (augment(images, training=True), labels))
         .map(lambda images, labels: (images + keras.random.normal(tf.shape(images), stddev=0.05), labels))
         .prefetch(2))
test = tf.data.Dataset.from_tensor_slices((x[:128], y[:128])).batch(64)

model = keras.Sequential([keras.Input((12, 12, 1)), keras.layers.Conv2D(8, 3, activation="relu"),
                          keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy", metrics=["accuracy"])
history = model.fit(train, epochs=2, verbose=0)
loss, accuracy = model.evaluate(test, verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "test_loss": loss,
                              "test_accuracy": accuracy}))
