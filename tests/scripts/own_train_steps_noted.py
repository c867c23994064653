"""Two models with their own train_step fit under `acceltrain run --simulate-devices 2` on TensorFlow: `Mean`'s loss a
plain mean over its batch (under 2 replicas its step is 2× one device's: own_train_step_under_mirrored.py), `Scaled`'s
from Keras's self.compute_loss (divided by the replicas already). Prints "trained" at the end.
    acceltrain run --simulate-devices 2 own_train_steps_noted.py  (tests/backends/test_tensorflow.py)"""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


class Mean(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(self(x, training=True) - y))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_weights), self.trainable_weights))
        return {"loss": loss}


class Scaled(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(y=y, y_pred=self(x, training=True))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_weights), self.trainable_weights))
        return {"loss": loss}


rng = np.random.default_rng(0)
x, y = rng.random((32, 3)).astype("float32"), rng.random((32, 1)).astype("float32")
for model_class in (Mean, Scaled):
    inputs = keras.Input((3,))
    model = model_class(inputs, keras.layers.Dense(1)(inputs))
    model.compile(keras.optimizers.SGD(0.1), loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
print("trained")
