"""A custom callback with on_train_batch_end (and on_epoch_end) that records the loss of every batch, as
people write to plot a loss curve. Synthetic classification data."""

import json

import keras
import numpy as np

keras.utils.set_random_seed(0)


class LossHistory(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.batch_losses, self.epoch_losses = [], []

    def on_train_batch_end(self, batch, logs=None):
        self.batch_losses.append(logs["loss"])

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_losses.append(logs["loss"])


rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 20)).astype("float32")
y = (x[:, :5].sum(1) > 0).astype("int32")
model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(2, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
history = LossHistory()
model.fit(x, y, epochs=2, batch_size=64, callbacks=[history], verbose=0)
print("metrics:", json.dumps({"batches_seen": len(history.batch_losses), "first_batch_loss": history.batch_losses[0],
                              "last_batch_loss": history.batch_losses[-1], "epoch_loss": history.epoch_losses[-1]}))
