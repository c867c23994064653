"""A plain Keras script that predicts on sets whose sizes divide over no device count: 3 samples, 37 with
batch_size=8, 37 with Keras's default, 37 as a tf.Tensor and as a tf.data dataset batched by 8 (with --evaluate, then
evaluates the 37). Fixed weights, no training: every run prints the same numbers. With --library, the same through
acceltrain.connect() and Runtime.predict."""

import contextlib
import sys

library = "--library" in sys.argv
if library:
    import acceltrain

    runtime = acceltrain.connect(verbose=False)
import keras  # noqa: E402  (after connect: it sets the backend)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

x = np.random.default_rng(0).normal(size=(37, 5)).astype("float32")
with runtime.scope() if library else contextlib.nullcontext():
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3, activation="softmax")])
if library:
    model.predict = lambda x, **kwargs: runtime.predict(model, x, **kwargs)
model.set_weights([np.linspace(-1, 1, 15, dtype="float32").reshape(5, 3), np.array([0.1, -0.2, 0.3], "float32")])

for name, outputs in (("3", model.predict(x[:3], verbose=0)),
                      ("37 by 8", model.predict(x, batch_size=8, verbose=0)),
                      ("37", model.predict(x, verbose=0)),
                      ("37 tensor", model.predict(tf.constant(x), verbose=0)),
                      ("37 dataset", model.predict(tf.data.Dataset.from_tensor_slices(x).batch(8), verbose=0))):
    print(f"predict {name}: shape {tuple(outputs.shape)} values {' '.join(f'{v:.6f}' for v in outputs.ravel())}")

if "--evaluate" in sys.argv:  # the odd-sized set evaluated: under `acceltrain run`, repeated over the devices, said once
    model.compile(loss="sparse_categorical_crossentropy")
    print(f"evaluate 37: loss {model.evaluate(x, np.arange(37) % 3, verbose=0):.6f}")
