"""Ends as its command line says: `exits.py code N` calls sys.exit(N); `exits.py raise` raises;
`exits.py fit` raises from a callback inside Keras's fit."""

import sys


def fail():
    raise ValueError("the script's own error")


def fail_inside_fit():
    """An error raised inside Keras's fit, through acceltrain's hooks around it."""
    import keras
    import numpy as np

    class Fails(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            fail()

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(loss="mse")
    model.fit(np.zeros((8, 2), "float32"), np.zeros(8, "float32"), batch_size=8, verbose=0, callbacks=[Fails()])


if sys.argv[1] == "fit":
    fail_inside_fit()
if sys.argv[1] == "code":
    print(f"argv: {sys.argv}")
    sys.exit(int(sys.argv[2]))
fail()
