"""Multiple-instance learning, after keras.io's attention-based MIL example: each sample is a bag of instances,
labelled positive when any instance is, and the model is trained one bag at a time (batch_size=1), attention
pooling the instances of the bag.  python mil_batch_one.py"""

import json

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
bags, instances, features = 96, 6, 8
x = rng.normal(size=(bags, instances, features)).astype("float32")
key = rng.random((bags, instances)) < 0.12  # the instances that make a bag positive
x[key, 0] += 3.0
y = key.any(axis=1).astype("float32")


class AttentionPooling(keras.layers.Layer):
    """Ilse et al.'s attention pooling: a learned weight per instance, softmax over the bag."""

    def __init__(self, units=8, **kwargs):
        super().__init__(**kwargs)
        self.score = keras.layers.Dense(units, activation="tanh")
        self.weight = keras.layers.Dense(1)

    def call(self, instances):
        attention = keras.ops.softmax(self.weight(self.score(instances)), axis=1)
        return keras.ops.sum(attention * instances, axis=1)


inputs = keras.Input(shape=(instances, features))
embedded = keras.layers.Dense(16, activation="relu")(inputs)
pooled = AttentionPooling()(embedded)
model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(pooled))
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy", metrics=["accuracy"])
history = model.fit(x, y, batch_size=1, epochs=2, verbose=0)
loss, accuracy = model.evaluate(x, y, batch_size=1, verbose=0)
scores = model.predict(x[:5], batch_size=1, verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "eval_loss": loss, "eval_accuracy": accuracy,
                              "first_scores_sum": float(scores.sum())}))
