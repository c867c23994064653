"""A small vision transformer as keras.io writes it (image classification with ViT): Normalization adapted to the
images, RandomFlip, RandomRotation and RandomZoom inside the model, patches through MultiHeadAttention, numpy arrays:
`fit(batch_size=256, validation_data=[x_val, y_val])` with 167 validation images (no batch of them divides over 4 or
8 devices) given as a list, which Keras unpacks as a tuple; then evaluate."""

import json

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.random((1670 + 200, 32, 32, 3), dtype=np.float32)
y = rng.integers(0, 2, len(x)).astype("int32")
x[y == 1, 8:24, 8:24, 0] += 1.0  # a bright square in the middle: learnt within 2 epochs, so the metrics are stable
x_train, y_train, x_test, y_test = x[:1670], y[:1670], x[1670:], y[1670:]

augmentation = keras.Sequential([keras.layers.Normalization(), keras.layers.RandomFlip("horizontal"),
                                 keras.layers.RandomRotation(0.02), keras.layers.RandomZoom(0.2, 0.2)],
                                name="data_augmentation")
augmentation.layers[0].adapt(x_train)
inputs = keras.Input((32, 32, 3))
patches = keras.layers.Conv2D(32, 8, strides=8)(augmentation(inputs))  # 4 x 4 patches, projected
tokens = keras.layers.Reshape((16, 32))(patches)
attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=16)(tokens, tokens)
tokens = keras.layers.LayerNormalization()(keras.layers.Add()([tokens, attended]))
outputs = keras.layers.Dense(2, activation="softmax")(keras.layers.GlobalAveragePooling1D()(tokens))
model = keras.Model(inputs, outputs)
model.compile(keras.optimizers.AdamW(1e-3, weight_decay=1e-4), "sparse_categorical_crossentropy",
              metrics=["accuracy"])
history = model.fit(x_train[:1503], y_train[:1503], batch_size=256, epochs=2,
                    validation_data=[x_train[1503:], y_train[1503:]], verbose=0)
loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "val_loss": history.history["val_loss"][-1],
                              "test_loss": loss, "test_accuracy": accuracy}))
