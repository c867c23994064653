"""Prints, for each of its two fits, the walk of the fit through acceltrain's layers (interception.walking), as
one JSON line "walk: [[slot, layer], ...]", and what its callback saw; under `acceltrain run --checkpoint-dir` each
fit keeps its checkpoints in DIR/fit-N. Then the walks of an evaluate and a predict ("evaluate walk: ...").
Mirrors tests/test_assembly.py's Runtime.fit, evaluate and predict of the same job."""

import json

import keras
import numpy as np

from acceltrain.backends import interception

x = np.random.default_rng(0).random((64, 4), dtype=np.float32)
y = np.arange(64) % 2
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy")


class Seen(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs = 0

    def on_epoch_end(self, epoch, logs=None):
        self.epochs += 1


for epochs in (2, 1):
    seen = Seen()
    with interception.walking() as walk:
        model.fit(x, y, batch_size=16, epochs=epochs, verbose=0, callbacks=[seen])
    print("walk:", json.dumps(walk), flush=True)
    print("epochs seen:", seen.epochs, flush=True)

for name, call in [("evaluate", lambda: model.evaluate(x, y, batch_size=16, verbose=0)),
                   ("predict", lambda: model.predict(x, batch_size=16, verbose=0))]:
    with interception.walking() as walk:
        call()
    print(f"{name} walk:", json.dumps(walk), flush=True)
