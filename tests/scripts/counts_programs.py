"""One fit and evaluate (Adam + metrics=["accuracy"], a partial last batch, validation data), as a plain script's
`model.fit` under `acceltrain run -v` (argument "script") or through Runtime.fit with acceltrain's details on
("library"): the programs listed between the lines 'fit starts' and 'fit ends' are what the fit needed."""

import sys

import numpy as np

library = sys.argv[1] == "library"
if library:
    import acceltrain
    from acceltrain import log

    runtime = acceltrain.connect(verbose=False)
    log.set_verbose(True)  # each compiled program listed, as -v lists it

import keras  # noqa: E402  (after connect: it sets the backend)

rng = np.random.default_rng(0)
x = rng.normal(size=(1000, 20)).astype("float32")  # 15 batches of 64 and one of 40
y = (x[:, 0] + x[:, 1] > 0).astype("int32")
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(2, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
print("fit starts", file=sys.stderr, flush=True)
validation = (x[:200], y[:200])  # 3 batches of 64 and one of 8
if library:
    runtime.fit(model, x, y, batch_size=64, epochs=3, validation_data=validation, verbose=0)
    print("fit ends", file=sys.stderr, flush=True)
    print(runtime.evaluate(model, x, y, batch_size=64, verbose=0))
else:
    model.fit(x, y, batch_size=64, epochs=3, validation_data=validation, verbose=0)
    print("fit ends", file=sys.stderr, flush=True)
    print(model.evaluate(x, y, batch_size=64, verbose=0, return_dict=True))
