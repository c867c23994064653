"""A guide's smallest fit: a model trained on two samples (Keras's "Customizing what happens in fit" and
callback guides do this to show the mechanics), then evaluated and used to predict.  python two_sample_fit.py"""

import json

import keras
import numpy as np

keras.utils.set_random_seed(0)
inputs = keras.Input(shape=(3,))
outputs = keras.layers.Dense(1)(keras.layers.Dense(4, activation="relu")(inputs))
model = keras.Model(inputs, outputs)
model.compile(optimizer="adam", loss="mse", metrics=["mae"])

x = np.random.random((2, 3))
y = np.random.random((2, 1))
history = model.fit(x, y, epochs=3, verbose=0)
results = model.evaluate(x, y, verbose=0, return_dict=True)
prediction = model.predict(x, verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "eval_loss": results["loss"],
                              "eval_mae": results["mae"], "prediction_sum": float(prediction.sum()),
                              "prediction_shape": list(prediction.shape)}))
