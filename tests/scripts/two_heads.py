"""A model of several inputs and outputs for `acceltrain plan`: float features and integer ids in (a list), a
score and a class out (a dict), each output with its own loss and metric."""


def build():
    import keras

    features = keras.Input((16,), name="features")
    ids = keras.Input((4,), dtype="int32", name="ids")
    embedded = keras.layers.Flatten()(keras.layers.Embedding(50, 8)(ids))
    hidden = keras.layers.Dense(32, activation="relu")(keras.layers.Concatenate()([features, embedded]))
    outputs = {"score": keras.layers.Dense(1, name="score")(hidden),
               "label": keras.layers.Dense(3, name="label")(hidden)}
    model = keras.Model([features, ids], outputs)
    model.compile(keras.optimizers.Adam(1e-3),
                  loss={"score": "mse", "label": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
                  metrics={"label": ["accuracy"]})
    return model
