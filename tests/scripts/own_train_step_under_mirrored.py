"""Models with their own train_step (tf.GradientTape) trained one SGD step on one device, then under MirroredStrategy
over 2 logical CPUs without acceltrain's runtime, from the same weights and batch, one model for each way its loss is
written: `mean`, a plain mean over the batch it is given (as keras.io's VAE writes it); `compute_loss`, Keras's
self.compute_loss over the compiled loss (as keras.io's "customizing fit" guide writes it); `keras_loss`, a
keras.losses object called; `average_loss`, tf.nn.compute_average_loss with the global batch size. Prints each
way's step as "WAY one device: D" and "WAY 2 replicas: D" (the kernel's change, summed), "WAY ratio: R", and whether
acceltrain's reading of the step's source leaves it to the note, "WAY noted: True|False" (its backend's function
alone: no runtime).
    python own_train_step_under_mirrored.py  (tests/backends/test_tensorflow.py)"""

import contextlib
import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
GLOBAL_BATCH = 8


class Mean(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(self(x, training=True) - y))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_weights), self.trainable_weights))
        return {"loss": loss}


class ComputeLoss(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(y=y, y_pred=self(x, training=True))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_weights), self.trainable_weights))
        return {"loss": loss}


class KerasLoss(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = keras.losses.MeanSquaredError()(y, self(x, training=True))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_weights), self.trainable_weights))
        return {"loss": loss}


class AverageLoss(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            per_sample = keras.ops.mean(keras.ops.square(self(x, training=True) - y), axis=-1)
            loss = tf.nn.compute_average_loss(per_sample, global_batch_size=GLOBAL_BATCH)
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_weights), self.trainable_weights))
        return {"loss": loss}


WAYS = {"mean": Mean, "compute_loss": ComputeLoss, "keras_loss": KerasLoss, "average_loss": AverageLoss}

rng = np.random.default_rng(0)
x, y = rng.random((GLOBAL_BATCH, 3)).astype("float32"), rng.random((GLOBAL_BATCH, 1)).astype("float32")
for way, model_class in WAYS.items():
    steps = {}
    for name, scope in (("one device", contextlib.nullcontext()), ("2 replicas", strategy.scope())):
        with scope:
            keras.utils.set_random_seed(0)
            inputs = keras.Input((3,))
            model = model_class(inputs, keras.layers.Dense(1, kernel_initializer="ones")(inputs))
            model.compile(keras.optimizers.SGD(0.1), loss="mse")
        model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
        steps[name] = float(np.sum(model.get_weights()[0] - 1.0))
        print(f"{way} {name}: {steps[name]:.6f}")
    print(f"{way} ratio: {steps['2 replicas'] / steps['one device']:.4f}")

from acceltrain.backends import tensorflow as backend  # noqa: E402

for way, model_class in WAYS.items():
    print(f"{way} noted: {not backend.own_step_scales_its_loss(model_class.__new__(model_class))}")
