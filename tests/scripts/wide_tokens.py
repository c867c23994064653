"""A plain script, unchanged, whose training step's memory is mostly activations: three Dense layers (256 → 2048 →
2048 → 256) over each of 16 tokens, 5.2M parameters, Adam, fit(batch_size=512). On 8 simulated devices with 88 MiB
each (`--device-memory 88MiB`) its step compiled here needs more than that data parallel, under fsdp and on a
2 x 4 mesh, and fits under fsdp with 2 steps of 256 accumulated per update (layout/autopilot.py).

    acceltrain run --simulate-devices 8 --device-memory 88MiB tests/scripts/wide_tokens.py
"""

import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.normal(size=(512, 16, 256)).astype(np.float32)
y = (x[:, :, :10].mean(axis=1).argmax(axis=1)).astype(np.int32)  # a class read from the tokens

keras.utils.set_random_seed(0)
inputs = keras.Input((16, 256))
hidden = keras.layers.Dense(2048, activation="gelu")(inputs)
hidden = keras.layers.Dense(2048, activation="gelu")(hidden)
hidden = keras.layers.Dense(256)(hidden)
outputs = keras.layers.Dense(10)(keras.layers.GlobalAveragePooling1D()(hidden))
model = keras.Model(inputs, outputs, name="wide_tokens")
model.compile(keras.optimizers.Adam(1e-4), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(x, y, batch_size=512, epochs=2, verbose=0)
print("updates:", int(model.optimizer.iterations), "steps:", int(model.optimizer._iterations))
print("losses:", " ".join(f"{loss:.4f}" for loss in history.history["loss"]))
