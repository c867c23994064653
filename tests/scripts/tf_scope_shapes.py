"""TensorFlow scripts of several shapes, run plainly and under `acceltrain run --backend tensorflow` (which makes only
what Keras needs in the strategy's scope): a Sequential with Adam and accuracy fed by a tf.data pipeline built before
the model (map, shuffle, batch), a subclassed model with its own train_step and metric, a tf.Variable of the script's
own outside any model, and evaluate, predict, save, load and a second model built for inference after fit. Prints
one "name: value" line each; the variables' and strategies' kinds as the script sees them outside fit and in a callback.
With OWN_MIRRORED=N it is the hand-written distributed script instead: N logical CPUs, its two models made and compiled
in its own MirroredStrategy's scope, fit and the rest outside it, as TensorFlow's guides write it.
python tf_scope_shapes.py  (tests/commands/test_run.py)"""

import contextlib
import os
import tempfile

os.environ["KERAS_BACKEND"] = "tensorflow"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

own_replicas = int(os.environ.get("OWN_MIRRORED", "0"))
if own_replicas:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * own_replicas)
    made_in = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(own_replicas)]).scope
else:
    made_in = contextlib.nullcontext
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x[:, :4].sum(axis=1) > 0).astype("int32")


def said(name, value):
    print(f"{name}: {value}", flush=True)


# The script's own state, outside any model: as a plain run makes it.
steps_seen = tf.Variable(0, dtype=tf.int64)
said("own variable", type(steps_seen).__name__)
said("strategy outside fit", type(tf.distribute.get_strategy()).__name__)

# A tf.data pipeline built before any model: map, shuffle, batch.
dataset = (tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2.0, b))
           .shuffle(512, seed=1).batch(64))

with made_in():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(2)])
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
said("model variable", type(model.weights[0].value).__name__)


strategies_in_callback = set()


class CountSteps(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        steps_seen.assign_add(1)  # the script's own variable, from a callback: outside any replica, as plainly
        strategies_in_callback.add(type(tf.distribute.get_strategy()).__name__)  # the default strategy, as plainly


history = model.fit(dataset, epochs=3, verbose=0, callbacks=[CountSteps()])
said("sequential accuracy", round(history.history["accuracy"][-1], 4))
said("sequential loss", round(history.history["loss"][-1], 4))
said("own variable after fit", int(steps_seen.numpy()))
said("strategy in a callback", ", ".join(sorted(strategies_in_callback)))


class OwnStep(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(1)
        self.tracker = keras.metrics.Mean(name="loss")

    def call(self, inputs):
        return self.out(self.hidden(inputs))

    def train_step(self, data):
        inputs, targets = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(inputs, training=True)[:, 0] - tf.cast(targets, "float32")))
            scaled = loss / tf.distribute.get_strategy().num_replicas_in_sync  # as the run's note advises
        self.optimizer.apply_gradients(zip(tape.gradient(scaled, self.trainable_variables), self.trainable_variables))
        self.tracker.update_state(loss)
        return {"loss": self.tracker.result()}

    @property
    def metrics(self):
        return [self.tracker]


with made_in():
    own = OwnStep()
    own.compile(keras.optimizers.SGD(0.05))
own_history = own.fit(x, y, batch_size=64, epochs=3, verbose=0, shuffle=False)
said("own train_step loss", round(own_history.history["loss"][-1], 4))

# After fit: evaluate, predict, save and load, and a second model built for inference.
loss, accuracy = model.evaluate(dataset, verbose=0)
said("evaluate accuracy", round(accuracy, 4))
said("predict sum", round(float(np.abs(model.predict(x * 2.0, batch_size=64, verbose=0)).sum()), 2))
with tempfile.TemporaryDirectory() as folder:
    model.save(os.path.join(folder, "model.keras"))
    loaded = keras.models.load_model(os.path.join(folder, "model.keras"))
said("loaded evaluate accuracy", round(loaded.evaluate(dataset, verbose=0)[1], 4))
inference = keras.Sequential([model, keras.layers.Softmax()])
said("inference first row", np.round(inference.predict(x[:1] * 2.0, verbose=0)[0], 3).tolist())
