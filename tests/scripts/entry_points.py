"""Keras's entry points in the shapes plain scripts use them, one after another in one job:

    acceltrain launch --processes 2 --simulate-devices 2 entry_points.py OUT_DIR SHAPE [SHAPE ...]

Each shape builds a fresh model from the same seed, makes its calls and prints "SHAPE: ok" and the numbers
it got, which in a job of several processes are global: every process must print the same line. A
shape that hangs shows as a job that never ends (the test's timeout and the stall watchdog end it).
predict is left out: its preparation is another piece of work (issue 10).
"""

import sys
from pathlib import Path

import keras
import numpy as np

from acceltrain.datasets import MNIST_PATH  # only where to find the file

with np.load(MNIST_PATH) as mnist:
    x = mnist["x_train"][:2400].reshape(-1, 784).astype("float32") / 255
    y = mnist["y_train"][:2400]
    x_test = mnist["x_test"][:500].reshape(-1, 784).astype("float32") / 255
    y_test = mnist["y_test"][:500]
out = Path(sys.argv[1])


def model():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((784,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
    m.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return m


def seed_shape():
    """The seed's script: no batch size, steps_per_epoch, then evaluate with verbose=0, then save_weights."""
    m = model()
    m.fit(x, y, epochs=2, steps_per_epoch=20)
    loss, acc = m.evaluate(x_test, y_test, verbose=0)
    m.save_weights(out / "seed.weights.h5")
    m.load_weights(out / "seed.weights.h5")  # each process reads back a whole file, of the same weights
    return f"{acc:.4f} weights {_digest(m)}"


def _digest(m):
    """The model's weights, in a few characters: equal in every process when its copies are identical."""
    import hashlib

    return hashlib.sha256(b"".join(w.tobytes() for w in m.get_weights())).hexdigest()[:12]


def fit_batch_size_verbose_1():
    history = model().fit(x, y, batch_size=128, epochs=1, verbose=1)
    return f"{history.history['loss'][-1]:.4f}"


def fit_validation_split_verbose_2():
    history = model().fit(x, y, batch_size=96, epochs=2, validation_split=0.2, verbose=2)
    return f"{history.history['val_accuracy'][-1]:.4f}"


def fit_validation_data_verbose_0():
    history = model().fit(x, y, batch_size=128, epochs=1, validation_data=(x_test, y_test), verbose=0)
    return f"{history.history['val_loss'][-1]:.4f}"


def fit_callbacks():
    class CountSteps(keras.callbacks.Callback):  # a script's own callback, wanting every step's logs
        steps = 0

        def on_train_batch_end(self, batch, logs=None):
            CountSteps.steps += 1
            assert logs["loss"] > 0

    callbacks = [CountSteps(), keras.callbacks.EarlyStopping(monitor="loss", patience=1),
                 keras.callbacks.ReduceLROnPlateau(monitor="loss", patience=1),
                 keras.callbacks.ModelCheckpoint(str(out / "best.keras"), monitor="loss")]
    history = model().fit(x, y, batch_size=128, epochs=2, verbose=0, callbacks=callbacks)
    return f"{CountSteps.steps} steps, {len(history.history['loss'])} epochs"


def evaluate_dict_verbose_1():
    m = model()
    m.fit(x, y, batch_size=128, epochs=1, verbose=0)
    metrics = m.evaluate(x_test, y_test, batch_size=100, verbose=1, return_dict=True)
    return f"{metrics['accuracy']:.4f}"


def save():
    m = model()
    m.fit(x, y, batch_size=128, epochs=1, verbose=0)
    m.save(out / "model.keras")
    m.save_weights(out / "model.weights.h5")
    loaded = keras.models.load_model(out / "model.keras")
    return f"saved, loaded back: weights {_digest(loaded)}"


for shape in sys.argv[2:]:
    print(f"{shape}: ok {globals()[shape]()}", flush=True)
