"""A plain Keras script that makes the fit mistakes named on its command line, one fit each, in order.

Each case is announced on stderr ("== CASE"), so a test can tell which fit a warning came from.
"""

import sys

import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.random((1024, 8), dtype=np.float32)
y = rng.integers(0, 10, 1024)


def model(loss="sparse_categorical_crossentropy"):
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(10, activation="softmax")])
    m.compile("sgd", loss, metrics=["accuracy"])
    return m


sparse = model()
for case in sys.argv[1:]:
    print(f"== {case}", file=sys.stderr, flush=True)
    if case == "clean":  # odd sizes too: acceltrain trims (fit) or repeats (evaluate) them, silently
        sparse.fit(x[:1003], y[:1003], batch_size=128, epochs=1, validation_split=0.1, verbose=0)
        sparse.evaluate(x[:1001], y[:1001], batch_size=128, verbose=0)
    elif case == "partial_epoch":
        sparse.fit(x, y, batch_size=64, steps_per_epoch=4, epochs=1, verbose=0)
    elif case == "float64":
        sparse.fit(x.astype("float64"), y, batch_size=128, epochs=1, verbose=0)
    elif case == "small_batch":
        sparse.fit(x, y, batch_size=16, epochs=1, verbose=0)
    elif case == "uneven_batch":
        sparse.fit(x, y, batch_size=100, epochs=1, verbose=0)
    elif case == "one_hot_sparse":
        sparse.fit(x, np.eye(10, dtype="float32")[y], batch_size=128, epochs=1, verbose=0)
    elif case == "indices_categorical":
        model("categorical_crossentropy").fit(x, y, batch_size=128, epochs=1, verbose=0)
    else:
        sys.exit(f"unknown case {case!r}")
print("done", file=sys.stderr, flush=True)
