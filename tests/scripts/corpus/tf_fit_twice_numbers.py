"""fit called twice in a row (the second continuing from initial_epoch=2, validating every 2nd epoch on a tuple with
sample weights), a batch that divides no data set, compile(steps_per_execution=4), then the optimizer's step count and
learning rate read as Python numbers (int(), float()), as scripts print them. A script that sets TensorFlow itself.
python tf_fit_twice_numbers.py"""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import json  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1003, 12)).astype("float32")
y = (x[:, :3].sum(1) > 0).astype("float32")
w = rng.uniform(0.5, 1.5, size=1003).astype("float32")
model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dense(1, activation="sigmoid")])
model.compile(keras.optimizers.Adam(1e-2), "binary_crossentropy", metrics=["accuracy"], weighted_metrics=["accuracy"],
              steps_per_execution=4)
first = model.fit(x[:800], y[:800], epochs=2, batch_size=48, shuffle=False, verbose=0)
second = model.fit(x[:800], y[:800], epochs=5, initial_epoch=2, batch_size=48, validation_freq=2,
                   validation_data=(x[800:], y[800:], w[800:]), verbose=0)
scores = model.evaluate(x[800:], y[800:], sample_weight=w[800:], verbose=0, return_dict=True)
# Read as numbers: under a strategy these are mirrored variables (TypeError there before keras_internals' fix)
print("metrics:", json.dumps({"first_loss": first.history["loss"][-1], "loss": second.history["loss"][-1],
                              "epochs": second.epoch, "validated": len(second.history["val_loss"]),
                              "val_loss": second.history["val_loss"][-1], **scores,
                              "iterations": int(model.optimizer.iterations),
                              "learning_rate": float(model.optimizer.learning_rate)}))
