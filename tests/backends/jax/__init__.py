"""Tests of backends/jax/, one file per module; the small models they train."""

import numpy as np


def _model(keras):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy")
    return model


IMAGES = np.random.default_rng(0).random((64, 10, 10, 1), dtype=np.float32)
LABELS = (IMAGES.mean(axis=(1, 2, 3)) > 0.5).astype("int32")
