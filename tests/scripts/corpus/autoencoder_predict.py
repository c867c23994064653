"""A convolutional autoencoder on MNIST, as in Keras's denoising-autoencoder example: fit(x, x) with
validation data, then predict on a few test images.  python autoencoder_predict.py MNIST.npz"""

import json
import sys

import keras
import numpy as np

keras.utils.set_random_seed(0)
with np.load(sys.argv[1]) as data:
    train = np.expand_dims(data["x_train"][:1024].astype("float32") / 255, -1)
    test = np.expand_dims(data["x_test"][:256].astype("float32") / 255, -1)

inputs = keras.Input(shape=(28, 28, 1))
x = keras.layers.Conv2D(8, (3, 3), activation="relu", padding="same")(inputs)
x = keras.layers.MaxPooling2D((2, 2), padding="same")(x)
x = keras.layers.Conv2DTranspose(8, (3, 3), strides=2, activation="relu", padding="same")(x)
outputs = keras.layers.Conv2D(1, (3, 3), activation="sigmoid", padding="same")(x)
autoencoder = keras.Model(inputs, outputs)
autoencoder.compile(optimizer="adam", loss="binary_crossentropy")
history = autoencoder.fit(train, train, epochs=2, batch_size=128, shuffle=True, validation_data=(test, test),
                          verbose=0)
reconstructed = autoencoder.predict(test[:10], verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "val_loss": history.history["val_loss"][-1],
                              "predict_shape": list(reconstructed.shape),
                              "predict_mean": float(reconstructed.mean())}))
