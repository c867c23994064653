"""A model called on strings (TextVectorization inside it), evaluated under MirroredStrategy over 2 logical CPUs,
without acceltrain's runtime: first as Keras runs it, then inside keras_internals.built_from_one_replica. Prints one
line each: "keras: <error type>" or "keras: ok", "one replica: ok" or its error.
python strings_under_mirrored.py  (tests/backends/test_keras_internals.py)"""

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
texts = np.array(["good film", "bad film", "good plot", "bad plot"] * 4)
dataset = tf.data.Dataset.from_tensor_slices((texts, np.array([1, 0, 1, 0] * 4))).batch(8)
vectorize = keras.layers.TextVectorization(max_tokens=8, output_sequence_length=2)
vectorize.adapt(texts)


def model():
    with strategy.scope():
        strings = keras.Input(shape=(1,), dtype="string")
        hidden = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(8, 2)(vectorize(strings)))
        made = keras.Model(strings, keras.layers.Dense(1, activation="sigmoid")(hidden))
        made.compile(loss="binary_crossentropy")
    return made


for name, context in (("keras", lambda m: contextlib.nullcontext()),
                      ("one replica", keras_internals.built_from_one_replica)):
    evaluated = model()
    try:
        with context(evaluated):
            evaluated.evaluate(dataset, verbose=0)
        print(f"{name}: ok", flush=True)
    except Exception as error:  # noqa: BLE001 - the line names it
        print(f"{name}: {type(error).__name__}: {str(error)[:160]}", flush=True)
print("own method back:", "_maybe_symbolic_build" not in vars(evaluated))
