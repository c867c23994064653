"""Prints, while each of its fit, evaluate and predict runs, how many of acceltrain's wrappers stand over Keras's
own method of the trainer class (following __wrapped__: Keras wraps its own too), and validates inside its fit; at
the first step's end, how many stand over the model's train function; while it saves, over keras.Model.save; and
over keras.config.set_backend."""

from pathlib import Path

import keras
import numpy as np

import acceltrain
from acceltrain.backends import keras_internals

ACCELTRAIN = Path(acceltrain.__file__).resolve().parent


def wrappers(method) -> int:
    count = 0
    while method is not None:
        count += Path(method.__code__.co_filename).resolve().is_relative_to(ACCELTRAIN)  # by module path
        method = getattr(method, "__wrapped__", None)
    return count


class Count(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        print("during fit:", wrappers(keras_internals.trainer_class(keras.backend.backend()).fit), flush=True)

    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            print("train_function:", keras_internals.train_function_wrappers(self.model), flush=True)

    def on_test_begin(self, logs=None):
        print("during evaluate:", wrappers(keras_internals.trainer_class(keras.backend.backend()).evaluate), flush=True)

    def on_predict_begin(self, logs=None):
        print("during predict:", wrappers(keras_internals.trainer_class(keras.backend.backend()).predict), flush=True)


model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
x, y = np.random.default_rng(0).random((32, 4), dtype=np.float32), np.arange(32) % 2
model.fit(x, y, batch_size=8, epochs=1, validation_split=0.25, verbose=0, callbacks=[Count()])
model.evaluate(x, y, batch_size=8, verbose=0, callbacks=[Count()])
model.predict(x, batch_size=8, verbose=0, callbacks=[Count()])
print("save:", wrappers(keras.Model.save), "save_weights:", wrappers(keras.Model.save_weights), flush=True)
print("set_backend:", wrappers(keras.config.set_backend), flush=True)
