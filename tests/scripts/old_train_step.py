"""A script written for Keras 2 / TensorFlow: `train_step(self, data)` with a GradientTape. Keras 3 on JAX
calls train_step(state, data), so its fit fails plainly too: the error is the script's, not acceltrain's."""

import keras
import numpy as np


class OldStyle(keras.Model):
    def train_step(self, data):
        import tensorflow as tf

        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(y=y, y_pred=self(x, training=True))
        self.optimizer.apply(tape.gradient(loss, self.trainable_variables), self.trainable_variables)
        return {"loss": loss}


inputs = keras.Input((4,))
model = OldStyle(inputs, keras.layers.Dense(1)(inputs))
model.compile("sgd", "mse")
model.fit(np.zeros((64, 4), "float32"), np.zeros((64, 1), "float32"), epochs=1, batch_size=16, verbose=0)
print("trained")
