"""A GAN with two optimizers in one train_step, learning a 2-D ring of points. On JAX, the stateless way:
each optimizer's variables are kept on the model (so Keras carries them between steps) and updated with
`stateless_apply`; on TensorFlow, a GradientTape per network."""

import json

import keras
import numpy as np
from keras import ops

keras.utils.set_random_seed(0)
LATENT = 8


def mlp(inputs, outputs, activation=None, name=None):
    return keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(32, activation="relu"),
                             keras.layers.Dense(outputs, activation=activation)], name=name)


class GAN(keras.Model):
    def __init__(self):
        super().__init__()
        self.generator = mlp(LATENT, 2, name="generator")
        self.discriminator = mlp(2, 1, name="discriminator")
        self.d_optimizer = keras.optimizers.Adam(1e-3)
        self.g_optimizer = keras.optimizers.Adam(1e-3)
        self.d_optimizer.build(self.discriminator.trainable_variables)
        self.g_optimizer.build(self.generator.trainable_variables)
        self.d_optimizer_state = list(self.d_optimizer.variables)  # tracked: Keras carries them step to step
        self.g_optimizer_state = list(self.g_optimizer.variables)
        self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
        self.seed_generator = keras.random.SeedGenerator(1)
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker]

    def call(self, points):  # Keras builds the model on a batch of the training data: real points
        return self.discriminator(points)

    def d_loss(self, d_weights, d_state, real, fake):
        real_logits, d_state = self.discriminator.stateless_call(d_weights, d_state, real)
        fake_logits, d_state = self.discriminator.stateless_call(d_weights, d_state, fake)
        logits = ops.concatenate([real_logits, fake_logits])
        labels = ops.concatenate([ops.ones_like(real_logits), ops.zeros_like(fake_logits)])
        return self.loss_fn(labels, logits), d_state

    def g_loss(self, g_weights, g_state, d_weights, d_state, noise):
        fake, g_state = self.generator.stateless_call(g_weights, g_state, noise)
        logits, _ = self.discriminator.stateless_call(d_weights, d_state, fake)
        return self.loss_fn(ops.ones_like(logits), logits), g_state

    def train_step(self, state, real):
        if keras.backend.backend() != "jax":
            raise NotImplementedError
        import jax

        trainable, non_trainable, optimizer_variables, metrics_variables = state
        values = {id(v): value for v, value in zip(self.trainable_variables, trainable)}
        values.update({id(v): value for v, value in zip(self.non_trainable_variables, non_trainable)})
        pick = lambda variables: [values[id(v)] for v in variables]  # noqa: E731
        g_w, g_s = pick(self.generator.trainable_variables), pick(self.generator.non_trainable_variables)
        d_w, d_s = pick(self.discriminator.trainable_variables), pick(self.discriminator.non_trainable_variables)
        d_opt, g_opt = pick(self.d_optimizer_state), pick(self.g_optimizer_state)
        seed_state = pick([self.seed_generator.state])

        batch = ops.shape(real)[0]
        noise = keras.random.normal((batch, LATENT), seed=seed_state[0])
        fake, _ = self.generator.stateless_call(g_w, g_s, noise)
        (d_loss, d_s), d_grads = jax.value_and_grad(self.d_loss, has_aux=True)(d_w, d_s, real, fake)
        d_w, d_opt = self.d_optimizer.stateless_apply(d_opt, d_grads, d_w)
        (g_loss, g_s), g_grads = jax.value_and_grad(self.g_loss, has_aux=True)(g_w, g_s, d_w, d_s, noise)
        g_w, g_opt = self.g_optimizer.stateless_apply(g_opt, g_grads, g_w)

        new = {}
        for variables, updated in ((self.generator.trainable_variables, g_w),
                                   (self.generator.non_trainable_variables, g_s),
                                   (self.discriminator.trainable_variables, d_w),
                                   (self.discriminator.non_trainable_variables, d_s),
                                   (self.d_optimizer_state, d_opt), (self.g_optimizer_state, g_opt),
                                   ([self.seed_generator.state], [seed_state[0] + ops.array([0, 1], dtype="uint32")])):
            new.update({id(v): value for v, value in zip(variables, updated)})
        trainable = [new.get(id(v), value) for v, value in zip(self.trainable_variables, trainable)]
        non_trainable = [new.get(id(v), value) for v, value in zip(self.non_trainable_variables, non_trainable)]
        d_vars, g_vars = metrics_variables[:2], metrics_variables[2:]
        d_vars = self.d_loss_tracker.stateless_update_state(d_vars, d_loss)
        g_vars = self.g_loss_tracker.stateless_update_state(g_vars, g_loss)
        logs = {"d_loss": self.d_loss_tracker.stateless_result(d_vars),
                "g_loss": self.g_loss_tracker.stateless_result(g_vars)}
        return logs, (trainable, non_trainable, optimizer_variables, d_vars + g_vars)


rng = np.random.default_rng(0)
angles = rng.uniform(0, 2 * np.pi, 2048)
ring = np.stack([np.cos(angles), np.sin(angles)], 1).astype("float32")
gan = GAN()
gan.compile(optimizer="sgd")  # Keras wants one; the two above are the ones this GAN uses
history = gan.fit(ring, epochs=2, batch_size=64, verbose=0)
samples = gan.generator.predict(rng.normal(size=(64, LATENT)).astype("float32"), verbose=0)
print("metrics:", json.dumps({"d_loss": history.history["d_loss"][-1], "g_loss": history.history["g_loss"][-1],
                              "sample_radius": float(np.linalg.norm(samples, axis=1).mean())}))
