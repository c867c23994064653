"""A keras.utils.PyDataset whose last batch divides over no device count (1,003 samples in batches of 64: 43 left),
for training, validation (250: 58 left) and evaluate; then predict on a PyDataset of inputs only."""

import json
import math

import keras
import numpy as np

keras.utils.set_random_seed(0)


class Batches(keras.utils.PyDataset):
    def __init__(self, x, y=None, batch_size=64, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch_size = x, y, batch_size

    def __len__(self):
        return math.ceil(len(self.x) / self.batch_size)

    def __getitem__(self, index):
        cut = slice(index * self.batch_size, (index + 1) * self.batch_size)
        return (self.x[cut] * 2.0 - 1.0,) if self.y is None else (self.x[cut] * 2.0 - 1.0, self.y[cut])


rng = np.random.default_rng(0)
x = rng.random((1253, 16), dtype=np.float32)
y = (x[:, :4].sum(1) > 2).astype("int32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(2, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(Batches(x[:1003], y[:1003]), validation_data=Batches(x[1003:], y[1003:]), epochs=2, verbose=0)
loss, accuracy = model.evaluate(Batches(x[1003:], y[1003:]), verbose=0)
predicted = model.predict(Batches(x[1003:]), verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "val_accuracy": history.history["val_accuracy"][-1],
                              "eval_loss": loss, "eval_accuracy": accuracy, "predicted": list(predicted.shape)}))
