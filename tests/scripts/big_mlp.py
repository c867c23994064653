"""A ~1.4-billion-parameter MLP with Adam, for `acceltrain plan`: too big to replicate on a 16 GiB chip."""

WIDTH = 26112  # 2 x 26112² + 1024 x 26112 + ... ≈ 1.39 B parameters; divides over 8 devices


def build():
    import keras

    model = keras.Sequential([keras.Input(shape=(1024,)), keras.layers.Dense(WIDTH, activation="relu"),
                              keras.layers.Dense(WIDTH, activation="relu"), keras.layers.Dense(WIDTH, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.Adam(1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def uncompiled():
    import keras

    return keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(2)])
