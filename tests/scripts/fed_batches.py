"""Counts the batches a fit trains, fed a Python generator, a keras.utils.PyDataset and a Grain DataLoader, 8 batches
of 8 samples an epoch, 2 epochs, Adam + accuracy, run plainly or under `acceltrain run`. Prints one JSON line: for each
kind, the batches trained each epoch (on_train_batch_end) and the optimizer's steps.

    python fed_batches.py KIND...     (KIND: generator, pydataset, grain)
"""

import json
import sys

import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.normal(size=(64, 8)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int32")


class Batches(keras.utils.PyDataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]


def generator():
    while True:
        for i in range(8):
            yield x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]


class Samples:
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return x[i], y[i]


def fed(kind):
    """The input and fit's own arguments for it."""
    if kind == "generator":
        return generator(), {"steps_per_epoch": 8}
    if kind == "pydataset":
        return Batches(), {}
    import grain

    sampler = grain.samplers.IndexSampler(64, num_epochs=1, shuffle=False, seed=0)
    return grain.DataLoader(data_source=Samples(), sampler=sampler, operations=[grain.transforms.Batch(8)],
                            worker_count=0), {}


class Counted(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(0)

    def on_train_batch_end(self, batch, logs=None):
        self.epochs[-1] += 1


found = {}
for kind in sys.argv[1:]:
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activation="relu"),
                              keras.layers.Dense(2, activation="softmax")])
    model.compile(keras.optimizers.Adam(1e-2), "sparse_categorical_crossentropy", metrics=["accuracy"])
    data, arguments = fed(kind)
    counted = Counted()
    model.fit(data, epochs=2, verbose=0, callbacks=[counted], **arguments)
    found[kind] = {"trained": counted.epochs, "optimizer_steps": int(model.optimizer.iterations.numpy())}
print(json.dumps(found))
