"""A keras.utils.PyDataset that serves batches by index (as for images loaded from files), for training
and validation."""

import json
import math

import keras
import numpy as np

keras.utils.set_random_seed(0)


class Batches(keras.utils.PyDataset):
    def __init__(self, x, y, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch_size = x, y, batch_size

    def __len__(self):
        return math.ceil(len(self.x) / self.batch_size)

    def __getitem__(self, index):
        cut = slice(index * self.batch_size, (index + 1) * self.batch_size)
        return self.x[cut] * 2.0 - 1.0, self.y[cut]


rng = np.random.default_rng(0)
x = rng.random((1280, 16), dtype=np.float32)
y = (x[:, :4].sum(1) > 2).astype("int32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(2, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(Batches(x[:1024], y[:1024], 64), validation_data=Batches(x[1024:], y[1024:], 64), epochs=2,
                    verbose=0)
loss, accuracy = model.evaluate(Batches(x[1024:], y[1024:], 64), verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "val_accuracy": history.history["val_accuracy"][-1],
                              "eval_loss": loss, "eval_accuracy": accuracy}))
