"""Transfer learning: fit a model, freeze its base, put a new head on it, compile again and fit; then
unfreeze and fine-tune at a low learning rate (the Keras transfer-learning guide's three fits)."""

import json

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 16)).astype("float32")
y_first = (x[:, :4].sum(1) > 0).astype("int32")
y_second = (x[:, 2:6].sum(1) > 0.5).astype("int32")

base = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                         keras.layers.BatchNormalization()], name="base")
first = keras.Sequential([base, keras.layers.Dense(2, activation="softmax")])
first.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
first.fit(x, y_first, epochs=1, batch_size=64, verbose=0)

base.trainable = False
inputs = keras.Input((16,))
outputs = keras.layers.Dense(2, activation="softmax")(base(inputs, training=False))
second = keras.Model(inputs, outputs)
second.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
frozen_kernel = base.layers[0].kernel.numpy().copy()
frozen = second.fit(x, y_second, epochs=1, batch_size=64, verbose=0)
base_unchanged = bool(np.array_equal(frozen_kernel, base.layers[0].kernel.numpy()))

base.trainable = True
second.compile(keras.optimizers.Adam(1e-5), "sparse_categorical_crossentropy", metrics=["accuracy"])
tuned = second.fit(x, y_second, epochs=1, batch_size=64, verbose=0)
print("metrics:", json.dumps({"frozen_loss": frozen.history["loss"][-1], "tuned_loss": tuned.history["loss"][-1],
                              "base_unchanged_while_frozen": base_unchanged,
                              "trainable_weights": len(second.trainable_weights)}))
