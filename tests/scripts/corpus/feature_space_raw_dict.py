"""keras.io's structured data classification with FeatureSpace, small: integer, string and float features in a
dict dataset, a FeatureSpace adapted on it and mapped in tf.data for training, then an inference model called on a
dict of raw Python values (each a tf tensor of one sample, one of them a string).
A script that sets TensorFlow itself.  python feature_space_raw_dict.py"""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import json  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras.utils import FeatureSpace  # noqa: E402

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
n = 400
columns = {"sex": rng.integers(0, 2, n), "cp": rng.integers(0, 4, n), "age": rng.normal(55, 9, n).astype("float32"),
           "chol": rng.normal(240, 40, n).astype("float32"),
           "thal": rng.choice(["fixed", "normal", "reversible"], n)}
target = ((columns["age"] > 55) | (columns["thal"] == "fixed")).astype("int32")
def dataset(rows):
    return tf.data.Dataset.from_tensor_slices(({k: v[rows] for k, v in columns.items()}, target[rows]))


train_ds = dataset(slice(0, 320)).shuffle(320, seed=0).batch(32)
val_ds = dataset(slice(320, None)).batch(32)

feature_space = FeatureSpace(
    features={"sex": FeatureSpace.integer_categorical(num_oov_indices=0),
              "cp": FeatureSpace.integer_categorical(num_oov_indices=0),
              "thal": FeatureSpace.string_categorical(num_oov_indices=0),
              "age": FeatureSpace.float_discretized(num_bins=10), "chol": FeatureSpace.float_normalized()},
    crosses=[FeatureSpace.cross(feature_names=("sex", "age"), crossing_dim=16)], output_mode="concat")
feature_space.adapt(train_ds.map(lambda x, _: x))
preprocessed_train = train_ds.map(lambda x, y: (feature_space(x), y)).prefetch(2)
preprocessed_val = val_ds.map(lambda x, y: (feature_space(x), y)).prefetch(2)

encoded = feature_space.get_encoded_features()
hidden = keras.layers.Dropout(0.5)(keras.layers.Dense(16, activation="relu")(encoded))
predictions = keras.layers.Dense(1, activation="sigmoid")(hidden)
training_model = keras.Model(inputs=encoded, outputs=predictions)
training_model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
inference_model = keras.Model(inputs=feature_space.get_inputs(), outputs=predictions)
history = training_model.fit(preprocessed_train, epochs=8, validation_data=preprocessed_val, verbose=0)

sample = {"sex": 1, "cp": 1, "age": 60.0, "chol": 233.0, "thal": "fixed"}
input_dict = {name: tf.convert_to_tensor([value]) for name, value in sample.items()}
probability = inference_model.predict(input_dict, verbose=0)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "val_accuracy": history.history["val_accuracy"][-1],
                              "probability": float(probability[0][0]), "predicted": list(probability.shape)}))
