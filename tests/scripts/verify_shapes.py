"""Plain Keras scripts for `acceltrain run --verify`, one shape each (issue 31): the correct ones must pass, the wrong
one must fail.

    python verify_shapes.py SHAPE      # dense_batchnorm, conv_batchnorm, bfloat16_mlp, dropout, embedding,
                                       # loss_divided_by_replicas
"""

import sys

import keras
import numpy as np

shape = sys.argv[1]
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 32)).astype("float32")
y = (x[:, 0] > 0).astype("int32")
cross_entropy = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = keras.optimizers.Adam(1e-2)

if shape == "dense_batchnorm":  # the Dense's bias gets no gradient: BatchNorm subtracts it again
    layers = [keras.Input((32,)), keras.layers.Dense(64), keras.layers.BatchNormalization(), keras.layers.ReLU()]
elif shape == "conv_batchnorm":  # Conv2D keeps Keras's default use_bias=True
    x = rng.normal(size=(256, 12, 12, 1)).astype("float32")
    y = (x.mean(axis=(1, 2, 3)) > 0).astype("int32")
    layers = [keras.Input((12, 12, 1)), keras.layers.Conv2D(8, 3), keras.layers.BatchNormalization(),
              keras.layers.ReLU(), keras.layers.GlobalAveragePooling2D()]
    optimizer = "adam"
elif shape == "bfloat16_mlp":
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    layers = [keras.Input((32,)), keras.layers.Dense(64, activation="relu")]
elif shape == "dropout":
    layers = [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dropout(0.2)]
elif shape == "embedding":
    x = rng.integers(0, 100, size=(512, 10)).astype("int32")
    y = (x[:, 0] % 2).astype("int32")
    layers = [keras.Input((10,), dtype="int32"), keras.layers.Embedding(100, 16), keras.layers.GlobalAveragePooling1D()]
elif shape == "loss_divided_by_replicas":  # wrong: Keras's loss is already the mean over the whole batch
    mean_over_batch = cross_entropy

    def divided(y_true, y_pred):
        distribution = keras.distribution.distribution()
        replicas = distribution.device_mesh.devices.size if distribution is not None else 1
        return mean_over_batch(y_true, y_pred) / replicas

    cross_entropy, layers = divided, [keras.Input((32,)), keras.layers.Dense(64, activation="relu")]
else:
    sys.exit(f"unknown shape {shape}")

model = keras.Sequential([*layers, keras.layers.Dense(2)])
model.compile(optimizer, cross_entropy, metrics=["accuracy"])
model.fit(x, y, batch_size=64, epochs=1, verbose=0)
print("trained")
