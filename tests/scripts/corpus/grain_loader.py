"""Grain's DataLoader (grain.python: a data source, an IndexSampler, a Batch operation), the JAX ecosystem's loader:
1,003 training records in batches of 64 (43 left at the end), a validation loader (250: 58 left), evaluate on a
loader."""

import json

import grain.python as grain
import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1253, 12)).astype("float32")
y = (x[:, :3].sum(1) > 0).astype("int32")


class Records:
    def __init__(self, start, stop):
        self.start, self.stop = start, stop

    def __len__(self):
        return self.stop - self.start

    def __getitem__(self, index):
        return x[self.start + index], y[self.start + index]


def loader(start, stop, shuffle):
    sampler = grain.IndexSampler(num_records=stop - start, shard_options=grain.NoSharding(), shuffle=shuffle,
                                 seed=0, num_epochs=1)
    return grain.DataLoader(data_source=Records(start, stop), sampler=sampler, worker_count=0,
                            operations=[grain.Batch(64, drop_remainder=False)])


model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(2, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(loader(0, 1003, True), validation_data=loader(1003, 1253, False), epochs=2, verbose=0)
loss, accuracy = model.evaluate(loader(1003, 1253, False), verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "val_loss": history.history["val_loss"][-1],
                              "eval_loss": loss, "eval_accuracy": accuracy}))
