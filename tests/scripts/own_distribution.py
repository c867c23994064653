"""A plain script that sets its own Keras distribution before it builds its model, as the Keras guides write one:

    python own_distribution.py [model 1x4 | model 2x2 | data | gemma 2x2]

`model RxC`: ModelParallel with a LayoutMap over a mesh of batch R × model C (the kernels' columns over "model");
`data`: DataParallel over every device; `gemma RxC`: a tiny GemmaCausalLM from a config with
GemmaBackbone.get_layout_map over that mesh. It fits (batch 32), evaluates and prints the sharding spec of its
first Dense's kernel (Gemma: its token embedding) and its loss.
"""

import sys

import keras
import numpy as np

KIND = sys.argv[1] if len(sys.argv) > 1 else "model"
SHAPE = tuple(int(n) for n in sys.argv[2].split("x")) if len(sys.argv) > 2 else (1, 4)

keras.utils.set_random_seed(0)
devices = keras.distribution.list_devices()
if KIND == "data":
    distribution = keras.distribution.DataParallel(devices=devices)
else:
    mesh = keras.distribution.DeviceMesh(SHAPE, ["batch", "model"], devices[: SHAPE[0] * SHAPE[1]])
    if KIND == "gemma":
        import keras_hub

        layout_map = keras_hub.models.GemmaBackbone.get_layout_map(mesh)
    else:
        layout_map = keras.distribution.LayoutMap(mesh)
        layout_map[".*hidden/kernel"] = (None, "model")
        layout_map[".*hidden/bias"] = ("model",)
    distribution = keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
keras.distribution.set_distribution(distribution)

rng = np.random.default_rng(0)
if KIND == "gemma":
    import keras_hub

    backbone = keras_hub.models.GemmaBackbone(vocabulary_size=64, num_layers=1, num_query_heads=4,
                                              num_key_value_heads=4, hidden_dim=32, intermediate_dim=64, head_dim=8)
    model = keras_hub.models.GemmaCausalLM(backbone, preprocessor=None)
    tokens = rng.integers(1, 64, (128, 9)).astype("int32")
    x = {"token_ids": tokens[:, :-1], "padding_mask": np.ones((128, 8), dtype="bool")}
    y = tokens[:, 1:]
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    kernel = backbone.token_embedding.embeddings
else:
    x = rng.random((256, 16), dtype=np.float32)
    y = (x.sum(axis=1) > 8).astype("int32")
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu", name="hidden"),
                              keras.layers.Dense(2, activation="softmax", name="output")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    kernel = model.layers[0].kernel
model.fit(x, y, batch_size=32, epochs=1, verbose=2)
loss = model.evaluate(x, y, batch_size=32, verbose=0)
print(f"kernel spec: {tuple(kernel.value.sharding.spec)}")
print(f"loss: {loss}")
