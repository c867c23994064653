"""A functional model on dicts: two named inputs, two named outputs with a loss, a metric and a loss weight each,
per-sample weights with validation_split on an odd number of samples, a second fit from its initial_epoch on a
weighted validation tuple, then evaluate and predict with batches that divide over no device count."""

import json

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
n = 403
a = rng.normal(size=(n, 6)).astype("float32")
b = rng.normal(size=(n, 3)).astype("float32")
label = (a[:, 0] > 0).astype("int32")
value = (a[:, 1] + b[:, 0]).astype("float32")[:, None]
weights = np.where(label == 1, 2.0, 1.0).astype("float32")  # the positives count twice, in validation too

a_in, b_in = keras.Input((6,), name="a"), keras.Input((3,), name="b")
hidden = keras.layers.Dense(16, activation="relu")(keras.layers.Concatenate()([a_in, b_in]))
model = keras.Model({"a": a_in, "b": b_in},
                    {"label": keras.layers.Dense(2, activation="softmax", name="label")(hidden),
                     "value": keras.layers.Dense(1, name="value")(hidden)})
model.compile("adam", loss={"label": "sparse_categorical_crossentropy", "value": "mse"},
              loss_weights={"label": 1.0, "value": 0.3}, metrics={"label": ["accuracy"], "value": ["mae"]})
inputs, targets = {"a": a, "b": b}, {"label": label, "value": value}
first = model.fit(inputs, targets, sample_weight=weights, validation_split=0.13, epochs=2, batch_size=32, verbose=0)
held = ({"a": a[:37], "b": b[:37]}, {"label": label[:37], "value": value[:37]}, weights[:37])
second = model.fit(inputs, targets, validation_data=held, initial_epoch=2, epochs=3, batch_size=32, verbose=0)
results = model.evaluate(held[0], held[1], batch_size=10, return_dict=True, verbose=0)
predicted = model.predict({"a": a[:29], "b": b[:29]}, batch_size=7, verbose=0)
print("metrics:", json.dumps({"val_loss": first.history["val_loss"][-1],
                              "val_label_loss": first.history["val_label_loss"][-1],
                              "second_val_loss": second.history["val_loss"][-1],
                              "eval_loss": results["loss"], "eval_accuracy": results["label_accuracy"],
                              "predicted_rows": len(predicted["value"]),
                              "predicted_value_sum": float(predicted["value"].sum())}))
