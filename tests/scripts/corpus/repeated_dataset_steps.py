"""A repeated tf.data dataset (it never ends) with steps_per_epoch and validation_steps."""

import json

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1280, 10)).astype("float32")
y = (x[:, :3].sum(1) > 0).astype("int32")
train = tf.data.Dataset.from_tensor_slices((x[:1024], y[:1024])).shuffle(1024, seed=0).repeat().batch(64)
validation = tf.data.Dataset.from_tensor_slices((x[1024:], y[1024:])).repeat().batch(64)

model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(2, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(train, steps_per_epoch=12, epochs=2, validation_data=validation, validation_steps=4, verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "val_loss": history.history["val_loss"][-1],
                              "val_accuracy": history.history["val_accuracy"][-1]}))
