"""keras.io's endpoint layer pattern, small: a layer that computes its own loss from targets passed as inputs
(`add_loss`), a model called on a dict of inputs, targets and sample weights, compiled
with no loss and fit with no y. A script that sets TensorFlow itself.  python add_loss_endpoint.py"""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import json  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402


class LogisticEndpoint(keras.layers.Layer):
    def __init__(self, name=None):
        super().__init__(name=name)
        self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)

    def call(self, targets, logits, sample_weights=None):
        self.add_loss(self.loss_fn(targets, logits, sample_weights))
        return ops.sigmoid(logits)


keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
inputs = keras.Input((3,), name="inputs")
targets = keras.Input((10,), name="targets")
sample_weight = keras.Input((), name="sample_weight")
logits = keras.layers.Dense(10)(inputs)
predictions = LogisticEndpoint(name="predictions")(targets, logits, sample_weight)
model = keras.Model(inputs=[inputs, targets, sample_weight], outputs=predictions)
model.compile(optimizer="adam")

x = rng.random((256, 3)).astype("float32")
data = {"inputs": x, "targets": (x @ rng.normal(size=(3, 10)) > 0.5).astype("float32"),
        "sample_weight": rng.random(256).astype("float32")}
history = model.fit(data, epochs=3, batch_size=32, verbose=0)
evaluated = model.evaluate(data, batch_size=32, verbose=0, return_dict=True)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "eval_loss": evaluated["loss"]}))
