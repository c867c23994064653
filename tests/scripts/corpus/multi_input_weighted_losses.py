"""The functional API guide's ticket model: three inputs (title and body as token sequences, tags as a binary
vector) and two outputs (a priority score and a department), each with its loss, weighted 1.0 and 0.2.
Synthetic tickets.  python multi_input_weighted_losses.py"""

import json

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
tickets, words, tags, departments = 1280, 500, 12, 4
title = rng.integers(0, words, size=(tickets, 10))
body = rng.integers(0, words, size=(tickets, 40))
tag = rng.integers(0, 2, size=(tickets, tags)).astype("float32")
priority = ((title < 50).mean(axis=1, keepdims=True) * 4 + tag[:, :1] * 0.3).clip(0, 1).astype("float32")
department = (tag[:, 1:1 + departments].argmax(axis=1) + (body[:, 0] < 100)) % departments

title_input = keras.Input(shape=(None,), name="title")
body_input = keras.Input(shape=(None,), name="body")
tags_input = keras.Input(shape=(tags,), name="tags")
title_features = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(words, 16)(title_input))
body_features = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(words, 16)(body_input))
features = keras.layers.concatenate([title_features, body_features, tags_input])
features = keras.layers.Dense(32, activation="relu")(features)
priority_output = keras.layers.Dense(1, name="priority")(features)
department_output = keras.layers.Dense(departments, name="department")(features)
model = keras.Model([title_input, body_input, tags_input], [priority_output, department_output])
model.compile(
    optimizer=keras.optimizers.RMSprop(1e-3),
    loss=[keras.losses.BinaryCrossentropy(from_logits=True),
          keras.losses.SparseCategoricalCrossentropy(from_logits=True)],
    loss_weights=[1.0, 0.2],
)
history = model.fit({"title": title, "body": body, "tags": tag}, {"priority": priority, "department": department},
                    epochs=2, batch_size=32, verbose=0)
results = model.evaluate({"title": title[:256], "body": body[:256], "tags": tag[:256]},
                         {"priority": priority[:256], "department": department[:256]}, verbose=0, return_dict=True)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], **results}))
