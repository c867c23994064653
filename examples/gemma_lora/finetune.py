"""An ordinary keras_hub LoRA fine-tune, unchanged for acceltrain: load a preset, enable LoRA, fit, evaluate,
generate, save the adapters and load them back. The task: counting by 2 or 3 (the preset learnt 1, 2 and 3, partly).

    python examples/gemma_lora/make_preset.py gemma_preset/
    python examples/gemma_lora/finetune.py gemma_preset/                     # plainly, on one device
    acceltrain run --simulate-devices 8 --device-memory 24MiB --verify 3 examples/gemma_lora/finetune.py gemma_preset/
"""

import sys
from pathlib import Path

import keras
import keras_hub
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_preset import counting  # noqa: E402

preset = sys.argv[1]
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2

keras.utils.set_random_seed(1)
lm = keras_hub.models.GemmaCausalLM.from_preset(preset, preprocessor=None)
lm.backbone.enable_lora(rank=4)
lm.compile(optimizer=keras.optimizers.Adam(1e-2),
           loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
           weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
x, y = counting(1024, (4,), seed=1)
x_test, y_test = counting(256, (4,), seed=2)
before = lm.evaluate(x_test, y_test, batch_size=32, verbose=0, return_dict=True)["accuracy"]
lm.fit(x, y, batch_size=32, epochs=epochs, verbose=2)
after = lm.evaluate(x_test, y_test, batch_size=32, verbose=0, return_dict=True)["accuracy"]
print(f"token accuracy: {before:.4f} before, {after:.4f} after")

# Generate: the first 8 tokens of 8 test sequences, continued greedily to 16.
prompt = {"token_ids": np.zeros((8, 16), "int32"), "padding_mask": np.zeros((8, 16), "int32")}
prompt["token_ids"][:, :8], prompt["padding_mask"][:, :8] = x_test["token_ids"][:8, :8], 1
generated = lm.generate(prompt, max_length=16, stop_token_ids=None)["token_ids"]
print("generated:", generated[:2].tolist())

# The adapters alone, saved and loaded into the preset again.
adapters = Path(preset).resolve().parent / "adapters.lora.h5"
lm.backbone.save_lora_weights(str(adapters))
reloaded = keras_hub.models.GemmaCausalLM.from_preset(preset, preprocessor=None)
reloaded.backbone.enable_lora(rank=4)
reloaded.backbone.load_lora_weights(str(adapters))
same = np.allclose(reloaded.predict(x_test, batch_size=32, verbose=0), lm.predict(x_test, batch_size=32, verbose=0),
                   atol=1e-4)
print(f"adapters: {adapters.stat().st_size:,} bytes, reloaded predictions the same: {same}")
