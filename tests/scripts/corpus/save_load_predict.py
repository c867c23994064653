"""Train, model.save to a .keras file, keras.models.load_model, then predict with the loaded model and
compare with the trained one. Also save_weights / load_weights into a fresh model."""

import json
import os
import tempfile

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 8)).astype("float32")
y = (x[:, 0] * x[:, 1] > 0).astype("int32")


def build():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(2, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


model = build()
model.fit(x, y, epochs=2, batch_size=64, verbose=0)
expected = model.predict(x[:100], verbose=0)
with tempfile.TemporaryDirectory() as folder:
    model.save(os.path.join(folder, "model.keras"))
    model.save_weights(os.path.join(folder, "model.weights.h5"))
    loaded = keras.models.load_model(os.path.join(folder, "model.keras"))
    fresh = build()
    fresh.load_weights(os.path.join(folder, "model.weights.h5"))
predicted = loaded.predict(x[:100], verbose=0)
print("metrics:", json.dumps({"loaded_vs_trained": float(np.abs(predicted - expected).max()),
                              "weights_vs_trained": float(np.abs(fresh.predict(x[:100], verbose=0) - expected).max()),
                              "loaded_accuracy": loaded.evaluate(x, y, verbose=0)[1],
                              "prediction_mean": float(predicted[:, 1].mean())}))
