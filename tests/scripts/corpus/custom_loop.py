"""A hand-written training loop that never calls fit: the model's stateless_call, jax.grad and the
optimizer's stateless_apply in one jitted step (JAX), or a GradientTape (TensorFlow); batches sliced by
hand. Synthetic regression data."""

import json

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 10)).astype("float32")
y = (x @ np.linspace(-1, 1, 10)).astype("float32")[:, None]

model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
optimizer = keras.optimizers.Adam(1e-2)
loss_fn = keras.losses.MeanSquaredError()

if keras.backend.backend() == "jax":
    import jax

    optimizer.build(model.trainable_variables)

    def compute_loss(trainable, non_trainable, xb, yb):
        prediction, non_trainable = model.stateless_call(trainable, non_trainable, xb, training=True)
        return loss_fn(yb, prediction), non_trainable

    @jax.jit
    def train_step(state, xb, yb):
        trainable, non_trainable, optimizer_state = state
        (loss, non_trainable), grads = jax.value_and_grad(compute_loss, has_aux=True)(trainable, non_trainable, xb, yb)
        trainable, optimizer_state = optimizer.stateless_apply(optimizer_state, grads, trainable)
        return loss, (trainable, non_trainable, optimizer_state)

    state = ([v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables],
             [v.value for v in optimizer.variables])
    losses = []
    for epoch in range(2):
        for start in range(0, len(x), 64):
            loss, state = train_step(state, x[start:start + 64], y[start:start + 64])
            losses.append(float(loss))
    for variable, value in zip(model.trainable_variables, state[0]):
        variable.assign(value)
else:
    import tensorflow as tf

    losses = []
    for epoch in range(2):
        for start in range(0, len(x), 64):
            with tf.GradientTape() as tape:
                loss = loss_fn(y[start:start + 64], model(x[start:start + 64], training=True))
            optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
            losses.append(float(loss))

final = float(loss_fn(y, model(x)))
print("metrics:", json.dumps({"first_loss": losses[0], "last_loss": losses[-1], "final_loss": final}))
