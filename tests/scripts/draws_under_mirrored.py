"""Keras's random draws in the replicas of MirroredStrategy over 2 logical CPUs, without acceltrain's runtime: a
SeedGenerator's normal draw, dropout with a fixed seed, and a Dropout layer called in training, each in both replicas,
as Keras draws them and inside keras_internals.draws_apart_per_replica. Prints, for each, whether the two replicas
drew alike; whether a draw outside the replicas is Keras's own inside too; and whether Keras's draw_seed was given back.
python draws_under_mirrored.py  (tests/backends/test_keras_internals.py)"""

import contextlib
import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from acceltrain.backends import keras_internals  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
keras_draw_seed = keras.src.backend.tensorflow.random.draw_seed

for name, context in (("keras", contextlib.nullcontext), ("apart", keras_internals.draws_apart_per_replica)):
    with strategy.scope():
        generator = keras.random.SeedGenerator(1337)
        layer = keras.layers.Dropout(0.5, seed=3)

    @tf.function
    def drawn():
        return strategy.run(lambda: (keras.random.normal((8,), seed=generator),
                                     keras.random.dropout(tf.ones(8), 0.5, seed=3),
                                     layer(tf.ones((2, 8)), training=True)))

    with context():
        draws = drawn()
        outside = keras.random.normal((8,), seed=1337).numpy()
    alike = [bool(np.array_equal(*(v.numpy() for v in strategy.experimental_local_results(d)))) for d in draws]
    print(f"{name}: alike {alike}")
    print(f"{name}: outside {outside.round(6).tolist()}")
print("given back:", keras.src.backend.tensorflow.random.draw_seed is keras_draw_seed)
