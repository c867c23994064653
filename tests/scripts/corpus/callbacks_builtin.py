"""Keras's own callbacks together: EarlyStopping, ModelCheckpoint (best only, to a temporary folder),
ReduceLROnPlateau, with validation data; then the best checkpoint is loaded and evaluated."""

import json
import os
import tempfile

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1280, 20)).astype("float32")
y = (x[:, :5].sum(1) + 0.3 * rng.normal(size=1280) > 0).astype("int32")
x_val, y_val = x[1024:], y[1024:]
x, y = x[:1024], y[:1024]

model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(2, activation="softmax")])
model.compile(keras.optimizers.Adam(1e-2), "sparse_categorical_crossentropy", metrics=["accuracy"])
with tempfile.TemporaryDirectory() as folder:
    best = os.path.join(folder, "best.keras")
    callbacks = [
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=1, restore_best_weights=True),
        keras.callbacks.ModelCheckpoint(best, monitor="val_loss", save_best_only=True),
        keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=1, min_lr=1e-4),
    ]
    history = model.fit(x, y, epochs=2, batch_size=64, validation_data=(x_val, y_val), callbacks=callbacks,
                        verbose=0)
    restored = keras.models.load_model(best)
    loss, accuracy = restored.evaluate(x_val, y_val, verbose=0)
print("metrics:", json.dumps({"epochs_run": len(history.history["loss"]), "val_loss": history.history["val_loss"][-1],
                              "best_val_loss": loss, "best_val_accuracy": accuracy,
                              "learning_rate": float(model.optimizer.learning_rate)}))
