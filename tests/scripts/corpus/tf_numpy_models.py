"""keras.io's "Writing Keras Models With TensorFlow NumPy", small: a subclassed model and layers written with
tf.experimental.numpy, a loss written with it, Sequential models of its layers, one fit inside the script's own
`tf.distribute.get_strategy().scope()`, keras.backend.clear_session() between, and three fits with a TensorBoard
callback. A script that sets TensorFlow itself.  python tf_numpy_models.py"""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import json  # noqa: E402
import tempfile  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow.experimental.numpy as tnp  # noqa: E402
from keras import layers  # noqa: E402

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x_train = rng.normal(size=(128, 13)).astype("float32")
y_train = (x_train @ rng.normal(size=(13, 1)) + 20).astype("float32")
x_test, y_test = x_train[:64], y_train[:64]
input_dim, EPOCHS, errors = 13, 2, {}


def evaluate_model(model, name):
    model.fit(x_train, y_train, epochs=EPOCHS, batch_size=32, verbose=0)
    errors[name] = model.evaluate(x_test, y_test, verbose=0)[1]


class TNPForwardFeedRegressionNetwork(keras.Model):
    def __init__(self, blocks=None, **kwargs):
        super().__init__(**kwargs)
        self.blocks = blocks

    def build(self, input_shape):
        current, self.block_weights, self.biases = input_shape[1], [], []
        for i, block in enumerate(self.blocks):
            self.block_weights.append(self.add_weight(shape=(current, block), name=f"block-{i}",
                                                      initializer="glorot_normal"))
            self.biases.append(self.add_weight(shape=(block,), name=f"bias-{i}", initializer="zeros"))
            current = block
        self.linear_layer = self.add_weight(shape=(current, 1), name="linear_projector", initializer="glorot_normal")

    def call(self, inputs):
        activations = inputs
        for w, b in zip(self.block_weights, self.biases):
            activations = tnp.maximum(tnp.matmul(activations, w) + b, 0.0)
        return tnp.matmul(activations, self.linear_layer)


def tnp_mse(y_true, y_pred):
    return tnp.mean(tnp.square(y_true - y_pred), axis=0)


class TNPDense(keras.layers.Layer):
    def __init__(self, units, activation=None):
        super().__init__()
        self.units, self.activation = units, activation

    def build(self, input_shape):
        self.w = self.add_weight(name="weights", shape=(input_shape[1], self.units), initializer="random_normal")
        self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros")

    def call(self, inputs):
        outputs = tnp.matmul(inputs, self.w) + self.bias
        return self.activation(outputs) if self.activation else outputs


def tnp_relu(x):
    return tnp.maximum(x, 0)


def layered():
    return keras.Sequential([TNPDense(3, activation=tnp_relu), TNPDense(3, activation=tnp_relu), TNPDense(1)])


def mixed():
    return keras.Sequential([TNPDense(3, activation=tnp_relu), layers.Dense(3, activation="relu"), TNPDense(1)])


def compiled(model, loss="mean_squared_error"):
    model.compile(optimizer="adam", loss=loss, metrics=[keras.metrics.MeanAbsolutePercentageError()])
    return model


evaluate_model(compiled(TNPForwardFeedRegressionNetwork(blocks=[3, 3])), "subclassed")
keras.backend.clear_session()
evaluate_model(compiled(TNPForwardFeedRegressionNetwork(blocks=[3, 3]), tnp_mse), "tnp_loss")
for name, make in (("layered", layered), ("mixed", mixed)):
    model = compiled(make())
    model.build((None, input_dim))
    evaluate_model(model, name)

strategy = tf.distribute.get_strategy()  # the script's own strategy: the default one on a CPU, plainly
with strategy.scope():
    model = compiled(layered())
    model.build((None, input_dim))
    evaluate_model(model, "in_scope")

keras.backend.clear_session()
logs = tempfile.mkdtemp()
for model, name in ((TNPForwardFeedRegressionNetwork(blocks=[3, 3]), "tb_subclassed"), (layered(), "tb_layered"),
                    (mixed(), "tb_mixed")):
    history = compiled(model).fit(x_train, y_train, epochs=EPOCHS, batch_size=32, verbose=0,
                                  callbacks=[keras.callbacks.TensorBoard(log_dir=os.path.join(logs, name))])
    errors[name] = history.history["loss"][-1]
print("metrics:", json.dumps(errors))
