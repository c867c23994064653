"""A subclassed model with its own train_step and test_step, as in Keras's "Customizing what happens in
fit()" guide: JAX's stateless style (stateless_call, optimizer.stateless_apply, stateless metric updates)
on JAX, a GradientTape on TensorFlow. Synthetic regression data."""

import json

import keras
import numpy as np

keras.utils.set_random_seed(0)


class JaxStatelessModel(keras.Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")
        self.loss_fn = keras.losses.MeanSquaredError()

    def compute_loss_and_updates(self, trainable_variables, non_trainable_variables, x, y, training=False):
        y_pred, non_trainable_variables = self.stateless_call(trainable_variables, non_trainable_variables, x,
                                                              training=training)
        return self.loss_fn(y, y_pred), (y_pred, non_trainable_variables)

    def train_step(self, state, data):
        import jax

        trainable_variables, non_trainable_variables, optimizer_variables, metrics_variables = state
        x, y = data
        grad_fn = jax.value_and_grad(self.compute_loss_and_updates, has_aux=True)
        (loss, (y_pred, non_trainable_variables)), grads = grad_fn(trainable_variables, non_trainable_variables, x,
                                                                  y, training=True)
        trainable_variables, optimizer_variables = self.optimizer.stateless_apply(optimizer_variables, grads,
                                                                                  trainable_variables)
        logs, metrics_variables = self._update_metrics(metrics_variables, loss, y, y_pred)
        return logs, (trainable_variables, non_trainable_variables, optimizer_variables, metrics_variables)

    def test_step(self, state, data):
        trainable_variables, non_trainable_variables, metrics_variables = state
        x, y = data
        loss, (y_pred, non_trainable_variables) = self.compute_loss_and_updates(
            trainable_variables, non_trainable_variables, x, y, training=False)
        logs, metrics_variables = self._update_metrics(metrics_variables, loss, y, y_pred)
        return logs, (trainable_variables, non_trainable_variables, metrics_variables)

    def _update_metrics(self, metrics_variables, loss, y, y_pred):
        loss_vars, mae_vars = metrics_variables[:len(self.loss_tracker.variables)], \
            metrics_variables[len(self.loss_tracker.variables):]
        loss_vars = self.loss_tracker.stateless_update_state(loss_vars, loss)
        mae_vars = self.mae_metric.stateless_update_state(mae_vars, y, y_pred)
        logs = {"loss": self.loss_tracker.stateless_result(loss_vars),
                "mae": self.mae_metric.stateless_result(mae_vars)}
        return logs, loss_vars + mae_vars

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae_metric]


class TapeModel(keras.Model):
    """The same model on TensorFlow: a GradientTape and stateful updates."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")
        self.loss_fn = keras.losses.MeanSquaredError()

    def train_step(self, data):
        import tensorflow as tf

        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.loss_fn(y, y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        return self._update(loss, y, y_pred)

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        return self._update(self.loss_fn(y, y_pred), y, y_pred)

    def _update(self, loss, y, y_pred):
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae_metric]


Model = JaxStatelessModel if keras.backend.backend() == "jax" else TapeModel
inputs = keras.Input(shape=(32,))
hidden = keras.layers.Dense(32, activation="relu")(inputs)
outputs = keras.layers.Dense(1)(hidden)
model = Model(inputs, outputs)
model.compile(optimizer="adam")

rng = np.random.default_rng(0)
x = rng.random((1024, 32), dtype=np.float32)
y = x[:, :8].sum(1, keepdims=True) - 4 + 0.1 * rng.random((1024, 1), dtype=np.float32)
history = model.fit(x, y, epochs=2, batch_size=64, verbose=0)
results = model.evaluate(x[:256], y[:256], verbose=0, return_dict=True)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "mae": history.history["mae"][-1],
                              "eval_loss": results["loss"], "eval_mae": results["mae"]}))
