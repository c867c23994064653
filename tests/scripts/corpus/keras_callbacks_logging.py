"""Keras's own callbacks a script keeps beside its fit: BackupAndRestore (its backup left nowhere once the fit ends),
LearningRateScheduler, CSVLogger (its rows read back), TerminateOnNaN, with validation_split; then a second fit
continuing from the first.  python keras_callbacks_logging.py"""

import json
import os
import tempfile

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1000, 20)).astype("float32")
y = (x[:, :5].sum(1) > 0).astype("int32")
model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(2, activation="softmax")])
model.compile(keras.optimizers.Adam(1e-2), "sparse_categorical_crossentropy", metrics=["accuracy"])
with tempfile.TemporaryDirectory() as folder:
    log = os.path.join(folder, "log.csv")
    callbacks = [keras.callbacks.BackupAndRestore(os.path.join(folder, "backup")),
                 keras.callbacks.LearningRateScheduler(lambda epoch, rate: rate * 0.5),
                 keras.callbacks.CSVLogger(log), keras.callbacks.TerminateOnNaN()]
    history = model.fit(x, y, epochs=3, batch_size=64, callbacks=callbacks, verbose=0, validation_split=0.2)
    with open(log) as rows:
        logged = rows.read().strip().splitlines()
    left = sorted(os.listdir(folder))  # BackupAndRestore deletes its backup at the end of a finished fit
more = model.fit(x, y, epochs=1, batch_size=64, verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "val_loss": history.history["val_loss"][-1],
                              "epochs": len(history.history["loss"]), "csv_rows": len(logged),
                              "csv_columns": logged[0].split(","), "left": left, "more_loss": more.history["loss"][-1],
                              "learning_rate": float(model.optimizer.learning_rate)}))
