"""A model whose activations, not its weights, fill the memory: four Dense(64) layers applied to each of 128
positions (17K parameters, 67 KiB of weights; at 128 samples a device, each layer's output is 4 MiB). For
the levers of `acceltrain plan` that shrink activations: bfloat16, remat, gradient accumulation."""


def build():
    import keras

    inputs = keras.Input((128, 64))
    x = inputs
    for _ in range(4):
        x = keras.layers.Dense(64, activation="gelu")(x)
    outputs = keras.layers.Dense(8)(keras.layers.GlobalAveragePooling1D()(x))
    model = keras.Model(inputs, outputs, name="wide_activations")
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model
