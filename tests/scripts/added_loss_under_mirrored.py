"""A layer's own loss (add_loss of a keras.losses.Loss's value, keras.io's endpoint layer) evaluated on one device,
then under MirroredStrategy over 2 logical CPUs without acceltrain's runtime: as Keras runs it, and inside
keras_internals.added_losses_scaled_once. Prints "one device: L", "keras: L", "scaled once: L", and whether the
model's own method and Loss.__call__ were given back.
python added_loss_under_mirrored.py  (tests/backends/test_keras_internals.py)"""

import contextlib
import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from acceltrain.backends import keras_internals  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


class Endpoint(keras.layers.Layer):
    def call(self, targets, logits):
        self.add_loss(keras.losses.BinaryCrossentropy(from_logits=True)(targets, logits))
        return logits


rng = np.random.default_rng(0)
data = {"inputs": rng.random((16, 3)).astype("float32"), "targets": (rng.random((16, 2)) > 0.5).astype("float32")}
weights = None


def model(scope):
    global weights
    with scope:
        inputs, targets = keras.Input((3,), name="inputs"), keras.Input((2,), name="targets")
        made = keras.Model([inputs, targets], Endpoint()(targets, keras.layers.Dense(2)(inputs)))
        made.compile(optimizer="sgd")
    weights = weights or made.get_weights()
    made.set_weights(weights)  # the same model in every case
    return made


keras_call = keras.losses.Loss.__call__
for name, scope, context in (("one device", contextlib.nullcontext(), lambda m: contextlib.nullcontext()),
                             ("keras", strategy.scope(), lambda m: contextlib.nullcontext()),
                             ("scaled once", strategy.scope(), keras_internals.added_losses_scaled_once)):
    evaluated = model(scope)
    with context(evaluated):
        print(f"{name}: {evaluated.evaluate(data, batch_size=8, verbose=0):.6f}", flush=True)
print("given back:", "_aggregate_additional_loss" not in vars(evaluated) and keras.losses.Loss.__call__ is keras_call)
