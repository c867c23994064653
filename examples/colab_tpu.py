"""The seed's Colab TPU tutorial, with acceltrain: the same file on a Colab or Kaggle TPU, a GPU or a CPU.

    python examples/colab_tpu.py            # 20 epochs of the seed's MNIST MLP
    python examples/colab_tpu.py 1          # one epoch, to try it

The seed's steps, and what each became:

    resolver = tf.distribute.cluster_resolver.TPUClusterResolver()  ┐
    tf.config.experimental_connect_to_cluster(resolver)             │  runtime = acceltrain.connect(backend="tensorflow")
    tf.tpu.experimental.initialize_tpu_system(resolver)             │  (TPU if one answers, else GPUs, else the CPU)
    strategy = tf.distribute.TPUStrategy(resolver)                  ┘
    with strategy.scope(): model = ...; model.compile(...)             with runtime.scope(): model = ...; model.compile(...)
    model.fit(x, y, steps_per_epoch=50, epochs=20)                     runtime.fit(model, x, y, batch_size=1200, epochs=20)
    model.save_weights(...)                                            model.save_weights("mnist_mlp.weights.h5")
"""

import sys

import acceltrain
from acceltrain import datasets

EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
BATCH_SIZE = 1200  # the global batch: 150 per core on an 8-core TPU, all of it on one CPU

# 1. Connect: find the TPU (or the GPUs, or the CPU) and choose the tf.distribute strategy.
runtime = acceltrain.connect(backend="tensorflow")
import keras  # noqa: E402 -- after connect(), which sets Keras's backend

runtime.seed(0)

# 2. The data: MNIST ships with acceltrain, so this runs with no download.
mnist = datasets.load_npz()
x_train = mnist.x_train.reshape(-1, 784).astype("float32") / 255.0
x_test = mnist.x_test.reshape(-1, 784).astype("float32") / 255.0
y_train, y_test = mnist.y_train.astype("int32"), mnist.y_test.astype("int32")

# 3. Build and compile inside the strategy's scope, so the variables live on every replica.
with runtime.scope():
    model = keras.Sequential(
        [keras.Input(shape=(784,))]
        + [keras.layers.Dense(units, activation="relu") for units in (512, 256, 128, 64)]
        + [keras.layers.Dense(10, activation="softmax")]
    )
    # A decaying rate instead of the seed's constant 1e-2: BENCHMARKS.md, section learning-rate, has the test
    # accuracy of each on every seed tried.
    schedule = keras.optimizers.schedules.CosineDecay(1e-3, decay_steps=EPOCHS * len(x_train) // BATCH_SIZE)
    model.compile(optimizer=keras.optimizers.RMSprop(schedule), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])

# 4. Train (steps_per_execution, the seed's steps_per_run, is set for the hardware), evaluate, save.
runtime.fit(model, x_train, y_train, batch_size=BATCH_SIZE, epochs=EPOCHS, verbose=2)
test = runtime.evaluate(model, x_test, y_test, batch_size=BATCH_SIZE, verbose=0)
print(f"{runtime}: test accuracy {test['accuracy']:.4f}")
# Keras 3 writes .weights.h5 from the Python process, so a local path works under TPUStrategy too.
model.save_weights("mnist_mlp.weights.h5")
