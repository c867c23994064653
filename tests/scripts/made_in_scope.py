"""keras_internals.keras_objects_made_in over MirroredStrategy on 2 logical CPUs, without acceltrain's runtime: what
Keras makes inside is the strategy's, the rest is as without it. Prints one "name: value" line each.
python made_in_scope.py  (tests/backends/test_keras_internals.py)"""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras.src.backend import tensorflow as core  # noqa: E402
from keras.src.backend.common import variables  # noqa: E402
from keras.src.backend.tensorflow import optimizer  # noqa: E402

from acceltrain.backends import keras_internals  # noqa: E402

trainer = type("trainer", (), {"TensorFlowTrainer": keras_internals.trainer_class("tensorflow")})  # 3.16: Trainer

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
keras_own = (core.Variable._initialize, trainer.TensorFlowTrainer.__init__, optimizer.TFOptimizer.__init__,
             optimizer.TFOptimizer.add_variable_from_reference, variables.Variable.__int__, variables.Variable.__float__)


def kind(variable):
    return type(variable.value if isinstance(variable, keras.Variable) else variable).__name__


with keras_internals.keras_objects_made_in(strategy):
    print("own tf.Variable:", kind(tf.Variable(1.0)))
    print("strategy in force:", type(tf.distribute.get_strategy()).__name__)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    adam = keras.optimizers.Adam()
    adam.build(model.trainable_variables)  # its slots, outside any fit
    print("layer weight:", kind(model.weights[0]), "| keras.Variable:", kind(keras.Variable(0.0)))
    print("model's strategy:", type(model.distribute_strategy).__name__, "| optimizer slot:", kind(adam.variables[-1]))
    model.compile(adam, "mse")
    history = model.fit(np.ones((8, 3), "float32"), np.ones((8, 2), "float32"), batch_size=8, verbose=0)
    print("fit outside the scope:", np.isfinite(history.history["loss"][0]))
    # A plain script's reads of a mirrored scalar (TypeError: int() argument must be ..., not 'MirroredVariable')
    print("read as numbers:", kind(adam.iterations), int(adam.iterations), float(adam.learning_rate),
          int(keras.Variable(3)), float(keras.Variable(0.5)))
    mapped = tf.data.Dataset.range(4).map(lambda i: keras.random.normal(()) + tf.cast(i, "float32"))
    print("keras.random in a dataset map:", len(list(mapped)))  # Keras's seed state made plain there
    other = tf.distribute.OneDeviceStrategy("/cpu:0")
    with other.scope():  # the code's own strategy wins
        print("under its own strategy:", type(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
                                              .distribute_strategy).__name__)
    with tf.distribute.get_strategy().scope():  # the default strategy's own scope: as the code wrote it, plainly
        print("under the default strategy's scope:", kind(keras.Variable(0.0)))
print("given back:", keras_own == (core.Variable._initialize, trainer.TensorFlowTrainer.__init__,
                                   optimizer.TFOptimizer.__init__, optimizer.TFOptimizer.add_variable_from_reference,
                                   variables.Variable.__int__, variables.Variable.__float__))
print("after:", kind(keras.Variable(0.0)))
