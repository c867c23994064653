"""keras.io's EEG signal classifier, small: a Conv1D + BatchNormalization network with Dropout and L2-regularised
Dense layers on one-hot labels in tf.data datasets, `class_weight`, ModelCheckpoint and ReduceLROnPlateau on a
validation metric, TopK/AUC/Precision/Recall metrics, then evaluate on the test dataset, whose last batch (74 rows)
divides over no replica count above 2, and predict on a list holding one array.  python conv1d_eval_remainder.py"""

import json
import os
import tempfile

import keras
import numpy as np
import tensorflow as tf
from keras import layers

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
labels = rng.integers(0, 4, size=1098)
x = (rng.normal(size=(1098, 32, 1)) + labels[:, None, None] * 0.3).astype("float32")
y = keras.utils.to_categorical(labels.reshape(-1, 1).astype("float32"))
train = tf.data.Dataset.from_tensor_slices((x[:512], y[:512])).shuffle(512).batch(128)
test = tf.data.Dataset.from_tensor_slices((x[512:], y[512:])).batch(128)  # 586 = 4 x 128 + 74
weights = {k: 1 - v / len(labels) for k, v in zip(*np.unique(labels, return_counts=True))}

inputs = keras.Input((32, 1))
hidden = inputs
for filters in (8, 16):
    hidden = layers.Conv1D(filters, 3, strides=2, activation="relu", padding="same")(hidden)
    hidden = layers.BatchNormalization()(hidden)
hidden = layers.Dropout(0.2)(layers.Flatten()(hidden))
hidden = layers.Dense(32, activation="relu", kernel_regularizer=keras.regularizers.L2())(hidden)
model = keras.Model(inputs, layers.Dense(4, activation="softmax")(hidden))
model.compile(keras.optimizers.Adam(amsgrad=True, learning_rate=0.001), keras.losses.CategoricalCrossentropy(),
              metrics=[keras.metrics.TopKCategoricalAccuracy(k=3), keras.metrics.AUC(), keras.metrics.Precision(),
                       keras.metrics.Recall()])
folder = tempfile.mkdtemp()
callbacks = [keras.callbacks.ModelCheckpoint(os.path.join(folder, "best_model.keras"), save_best_only=True,
                                             monitor="loss"),
             keras.callbacks.ReduceLROnPlateau(monitor="val_top_k_categorical_accuracy", factor=0.2, patience=2)]
history = model.fit(train, epochs=3, callbacks=callbacks, validation_data=test, class_weight=weights, verbose=0)
loss, top3, auc, precision, recall = model.evaluate(test, verbose=0)
predicted = np.argmax(model.predict([x[:12]], verbose=0), axis=1)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "val_loss": history.history["val_loss"][-1],
                              "eval_loss": loss, "eval_top3": top3, "eval_auc": auc, "eval_precision": precision,
                              "eval_recall": recall, "predicted": predicted.tolist()}))
