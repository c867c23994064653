"""A 2.1M-parameter MLP with Adam (tests/layout/test_placement.py's WIDE): its training state is 32.1 MiB replicated,
4.0 MiB a device under fsdp over 8. For `acceltrain plan --model` and `acceltrain train --model`."""


def build():
    import keras

    model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(1024, activation="relu"),
                              keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(512, activation="relu"),
                              keras.layers.Dense(10)], name="wide_mlp")
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def build_in_float32():
    """build(), its dtype policy set by the function itself, as a script may: under `acceltrain run` the script's own
    keras.config.set_dtype_policy wins over --precision, so plan plans it so."""
    import keras

    keras.config.set_dtype_policy("float32")
    return build()
