"""A plain Keras script (no acceltrain in it), for `acceltrain run --checkpoint-dir`: trains a small
classifier on fixed random data and writes its final weights to OUT.npz.

    python plain_checkpointed.py OUT.npz [--dataset] [--epochs 3] [--init-seed 0] [--steps-per-epoch N]

--dataset feeds a reshuffling tf.data.Dataset instead of numpy arrays. Each step sleeps a little (a
callback), so a test can signal the run while it trains.
"""

import argparse
import time

import keras
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--dataset", action="store_true")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--init-seed", type=int, default=0, help="the first layer's initial weights")
parser.add_argument("--steps-per-epoch", type=int, help="passed on to fit (arrays)")
args = parser.parse_args()

keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.normal(size=(1200, 16)).astype("float32")
y = (x[:, :4].argmax(axis=1) + (x[:, 4] > 0) * 4).astype("int64")  # 8 classes, learnable

first = keras.layers.Dense(32, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(args.init_seed))
model = keras.Sequential([keras.Input((16,)), first, keras.layers.Dense(8)])
model.compile(optimizer=keras.optimizers.Adam(1e-2),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])


class Slowly(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.02)


if args.dataset:
    import tensorflow as tf

    train = tf.data.Dataset.from_tensor_slices((x[:1000], y[:1000])).shuffle(1000, seed=2).batch(32)
    history = model.fit(train, validation_data=(x[1000:], y[1000:]), epochs=args.epochs, callbacks=[Slowly()],
                        verbose=2)
else:
    history = model.fit(x, y, batch_size=32, epochs=args.epochs, validation_split=1 / 6, callbacks=[Slowly()],
                        verbose=2, steps_per_epoch=args.steps_per_epoch)
print("final loss", history.history["loss"][-1])
np.savez(args.out, *model.get_weights())
