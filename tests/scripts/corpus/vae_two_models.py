"""keras.io's variational autoencoder, small: a script that sets TensorFlow itself, an encoder and a decoder
(functional models), a Sampling layer drawing keras.random.normal, and a VAE model of the two with no call(), its
own train_step written with tf.GradientTape and its own loss trackers.  python vae_two_models.py"""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import json  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import layers, ops  # noqa: E402

keras.utils.set_random_seed(0)
LATENT = 2


class Sampling(layers.Layer):
    """z = mean + exp(log_var / 2) * epsilon."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        epsilon = keras.random.normal(shape=ops.shape(z_mean), seed=self.seed_generator)
        return z_mean + ops.exp(0.5 * z_log_var) * epsilon


inputs = keras.Input(shape=(16,))
hidden = layers.Dense(32, activation="relu")(inputs)
z_mean = layers.Dense(LATENT, name="z_mean")(hidden)
z_log_var = layers.Dense(LATENT, name="z_log_var")(hidden)
encoder = keras.Model(inputs, [z_mean, z_log_var, Sampling()([z_mean, z_log_var])], name="encoder")

latent = keras.Input(shape=(LATENT,))
decoder = keras.Model(latent, layers.Dense(16, activation="sigmoid")(layers.Dense(32, activation="relu")(latent)),
                      name="decoder")


class VAE(keras.Model):
    def __init__(self, encoder, decoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder, self.decoder = encoder, decoder
        self.total_loss_tracker = keras.metrics.Mean(name="total_loss")
        self.reconstruction_loss_tracker = keras.metrics.Mean(name="reconstruction_loss")
        self.kl_loss_tracker = keras.metrics.Mean(name="kl_loss")

    @property
    def metrics(self):
        return [self.total_loss_tracker, self.reconstruction_loss_tracker, self.kl_loss_tracker]

    def train_step(self, data):
        with tf.GradientTape() as tape:
            z_mean, z_log_var, z = self.encoder(data)
            reconstruction = self.decoder(z)
            reconstruction_loss = ops.mean(ops.sum(ops.binary_crossentropy(data, reconstruction), axis=1))
            kl_loss = ops.mean(ops.sum(-0.5 * (1 + z_log_var - ops.square(z_mean) - ops.exp(z_log_var)), axis=1))
            total_loss = reconstruction_loss + kl_loss
        grads = tape.gradient(total_loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        self.total_loss_tracker.update_state(total_loss)
        self.reconstruction_loss_tracker.update_state(reconstruction_loss)
        self.kl_loss_tracker.update_state(kl_loss)
        return {m.name: m.result() for m in self.metrics}


rng = np.random.default_rng(0)
data = (rng.random(size=(1024, 16)) > 0.5).astype("float32")
vae = VAE(encoder, decoder)
vae.compile(optimizer=keras.optimizers.Adam(0.01))
history = vae.fit(data, epochs=3, batch_size=64, verbose=0)
print("metrics:", json.dumps({"loss": history.history["total_loss"][-1],
                              "reconstruction_loss": history.history["reconstruction_loss"][-1]}))
