"""A plain script, unchanged, building a ~25M-parameter Dense model at module level (issue 21's): its training
state with Adam is 384 MiB replicated. After training it prints what the first device holds of the weights and of
Adam's slots, read from their arrays' addressable shards, and the loss of each epoch.

    acceltrain run --simulate-devices 8 --device-memory 128MiB tests/scripts/wide_dense.py [--samples 512]
"""

import sys

import keras
import numpy as np

samples = int(sys.argv[sys.argv.index("--samples") + 1]) if "--samples" in sys.argv else 512
rng = np.random.default_rng(0)
x = rng.normal(size=(samples, 1024)).astype(np.float32)
y = np.tanh(x @ rng.normal(size=(1024, 1024)).astype(np.float32) / 32)

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((1024,)), keras.layers.Dense(4096, activation="relu"),
                          keras.layers.Dense(4096, activation="relu"), keras.layers.Dense(1024)], name="wide_dense")
model.compile(keras.optimizers.Adam(1e-4), "mse")
history = model.fit(x, y, batch_size=256, epochs=3, verbose=0)


def first_device_share(variables) -> float:
    """What the first device holds of these variables, over their whole bytes."""
    whole = held = 0
    for variable in variables:
        array = variable.value
        first = min(array.sharding.device_set, key=lambda device: device.id)
        whole += array.nbytes
        held += sum(shard.data.nbytes for shard in array.addressable_shards if shard.device == first)
    return held / whole


slots = [v for v in model.optimizer.variables if len(v.shape) >= 1]
print(f"first device: weights {first_device_share(model.weights):.4f} slots {first_device_share(slots):.4f} "
      f"({len(slots)} slots)")
print("losses:", " ".join(f"{loss:.5f}" for loss in history.history["loss"]))
