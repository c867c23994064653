"""A TensorFlow script that makes its models in its own MirroredStrategy's scope, over the first 2 of the CPUs
TensorFlow shows it (2 made here when run plainly; `acceltrain run --simulate-devices 4`'s 4 under it): a Sequential
with Adam and accuracy fitted on arrays with a callback, then evaluated and predicted (a batch of 50: it divides over
its 2 replicas, not over run's 4), and a subclassed model with its own train_step fitted on tf.data. Prints one
"name: value" line each. (No model of acceltrain's strategy beside them: two MirroredStrategies over the same CPUs in
one process fail plainly at the second one's first step, TensorFlow's "is joining a group with size4, but that group
has size 2", measured with TensorFlow 2.21.)
python tf_own_strategy.py  (tests/commands/test_run.py)"""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
if tf.config.get_logical_device_configuration(cpu) is None:  # plainly: 2 logical CPUs; under run, run's
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
own = tf.distribute.MirroredStrategy([device.name for device in tf.config.list_logical_devices("CPU")[:2]])
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x[:, :4].sum(axis=1) > 0).astype("int32")


def said(name, value):
    print(f"{name}: {value}", flush=True)


class OwnStep(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden, self.out = keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)
        self.tracked = keras.metrics.Mean(name="loss")

    def call(self, inputs):
        return self.out(self.hidden(inputs))

    def train_step(self, data):
        features, labels = data
        with tf.GradientTape() as tape:
            loss = keras.losses.sparse_categorical_crossentropy(labels, self(features), from_logits=True)
            loss = tf.nn.compute_average_loss(loss, global_batch_size=64)
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables))
        self.tracked.update_state(loss)
        return {"loss": self.tracked.result()}

    @property
    def metrics(self):
        return [self.tracked]


with own.scope():
    sequential = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(2)])
    sequential.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       metrics=["accuracy"])
    subclassed = OwnStep()
    subclassed.compile(keras.optimizers.SGD(0.1))
epochs_seen = []
history = sequential.fit(x, y, batch_size=64, epochs=2, verbose=0,
                         callbacks=[keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: epochs_seen.append(e))])
said("own sequential accuracy", round(history.history["accuracy"][-1], 4))
said("own sequential epochs seen", len(epochs_seen))
said("own sequential evaluate", round(sequential.evaluate(x, y, batch_size=64, verbose=0)[1], 4))
said("own sequential predict", sequential.predict(x[:100], batch_size=50, verbose=0).shape)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
said("own train_step loss", round(subclassed.fit(dataset, epochs=2, verbose=0).history["loss"][-1], 4))
