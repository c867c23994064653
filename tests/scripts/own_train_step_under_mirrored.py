"""A model with its own train_step (tf.GradientTape, its loss a mean over the batch it is given, as keras.io's VAE
writes it) trained one SGD step on one device, then under MirroredStrategy over 2 logical CPUs without acceltrain's
runtime, from the same weights and batch. Prints each run's step as "one device: D" and "2 replicas: D" (the kernel's
change, summed), and their ratio.  python own_train_step_under_mirrored.py  (tests/backends/test_tensorflow.py)"""

import contextlib
import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


class Own(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(self(x, training=True) - y))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_weights), self.trainable_weights))
        return {"loss": loss}


rng = np.random.default_rng(0)
x, y = rng.random((8, 3)).astype("float32"), rng.random((8, 1)).astype("float32")
steps = {}
for name, scope in (("one device", contextlib.nullcontext()), ("2 replicas", strategy.scope())):
    with scope:
        keras.utils.set_random_seed(0)
        inputs = keras.Input((3,))
        model = Own(inputs, keras.layers.Dense(1, kernel_initializer="ones")(inputs))
        model.compile(keras.optimizers.SGD(0.1))
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    steps[name] = float(np.sum(model.get_weights()[0] - 1.0))
    print(f"{name}: {steps[name]:.6f}")
print(f"ratio: {steps['2 replicas'] / steps['one device']:.4f}")
