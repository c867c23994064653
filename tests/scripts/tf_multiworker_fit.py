"""One of two local TensorFlow workers (TF_CONFIG set by the caller) running Keras 3's plain fit under
MultiWorkerMirroredStrategy, without acceltrain. keras-team/keras#20585 reports that this fails; acceltrain
refuses multi-worker TensorFlow because of it, and tests/backends/test_tensorflow_multiworker.py reruns this
to see whether it still fails."""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("sgd", "sparse_categorical_crossentropy")
x = np.random.default_rng(0).random((64, 4)).astype("float32")
y = np.random.default_rng(1).integers(0, 2, 64)
model.fit(x, y, batch_size=16, epochs=1, verbose=0)
print("fit finished", flush=True)
