"""A small TensorFlow fit in one of two shapes, for the time ledger's test (tests/commands/test_run.py): `arrays`
(numpy arrays, Adam, metrics=["accuracy"], 3 epochs) or `dataset` (a tf.data pipeline, shuffled and prefetched, with a
tf.data validation set, 3 epochs).  python tf_ledger_shapes.py arrays|dataset"""

import sys

import keras
import numpy as np

keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(2048, 32)).astype("float32")
y = (x[:, 0] > 0).astype("int32")
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(2, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
if sys.argv[1] == "arrays":
    model.fit(x, y, epochs=3, batch_size=32, verbose=2)  # 64 steps an epoch
else:
    import tensorflow as tf

    train = tf.data.Dataset.from_tensor_slices((x[:1792], y[:1792])).shuffle(512, seed=0).batch(32).prefetch(2)
    validation = tf.data.Dataset.from_tensor_slices((x[1792:], y[1792:])).batch(64)
    model.fit(train, validation_data=validation, epochs=3, verbose=2)  # 56 steps an epoch
