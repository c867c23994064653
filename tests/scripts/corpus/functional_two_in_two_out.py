"""A functional model with two inputs and two outputs, a loss and a metric per output, loss weights.
Synthetic data: a 'priority' regression and a 'department' classification from a title and a body."""

import json

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
n = 1024
title = rng.normal(size=(n, 16)).astype("float32")
body = rng.normal(size=(n, 32)).astype("float32")
priority = (title[:, :4].sum(1, keepdims=True) > 0).astype("float32")
department = (body[:, :3].argmax(1)).astype("int32")

title_in = keras.Input(shape=(16,), name="title")
body_in = keras.Input(shape=(32,), name="body")
features = keras.layers.concatenate([keras.layers.Dense(16, activation="relu")(title_in),
                                     keras.layers.Dense(16, activation="relu")(body_in)])
priority_out = keras.layers.Dense(1, activation="sigmoid", name="priority")(features)
department_out = keras.layers.Dense(3, activation="softmax", name="department")(features)
model = keras.Model(inputs=[title_in, body_in], outputs=[priority_out, department_out])
model.compile(
    optimizer=keras.optimizers.RMSprop(1e-3),
    loss={"priority": "binary_crossentropy", "department": "sparse_categorical_crossentropy"},
    loss_weights={"priority": 1.0, "department": 0.5},
    metrics={"priority": ["binary_accuracy"], "department": ["sparse_categorical_accuracy"]},
)
history = model.fit({"title": title, "body": body}, {"priority": priority, "department": department},
                    epochs=2, batch_size=64, verbose=0)
results = model.evaluate({"title": title[:256], "body": body[:256]},
                         {"priority": priority[:256], "department": department[:256]}, verbose=0, return_dict=True)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], **results}))
