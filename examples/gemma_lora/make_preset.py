"""Make a small Gemma preset to fine-tune, offline: a keras_hub GemmaCausalLM built from a config (random weights,
nothing downloaded), taught the start of a task (counting), and saved as a local preset folder, as a downloaded
preset would be laid out (config.json, model.weights.h5, task.json, metadata.json).

    python examples/gemma_lora/make_preset.py gemma_preset/ [--epochs 1]

Its feed-forward layers are wide (intermediate_dim 4096): most of its 3.3M parameters are frozen under LoRA, as
in a real model, so its weights, not its activations, are what does not fit a small device.
"""

import argparse

import keras
import keras_hub
import numpy as np

CONFIG = dict(vocabulary_size=128, num_layers=2, num_query_heads=4, num_key_value_heads=1, hidden_dim=128,
              intermediate_dim=4096, head_dim=32)
SEQUENCE = 32


def counting(count: int, steps, seed: int):
    """Sequences counting from a random start by one of `steps`, modulo the vocabulary; x the tokens, y the next."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, CONFIG["vocabulary_size"], size=(count, 1))
    step = rng.choice(steps, size=(count, 1))
    tokens = (start + step * np.arange(SEQUENCE + 1)) % CONFIG["vocabulary_size"]
    x = {"token_ids": tokens[:, :-1].astype("int32"), "padding_mask": np.ones((count, SEQUENCE), "int32")}
    return x, tokens[:, 1:].astype("int32")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    model = keras_hub.models.GemmaCausalLM(backbone=keras_hub.models.GemmaBackbone(**CONFIG), preprocessor=None)
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    model.fit(*counting(2048, (1, 2, 3), seed=0), batch_size=32, epochs=args.epochs, verbose=2)
    model.save_to_preset(args.folder)
    print(f"saved {model.count_params():,} parameters to {args.folder}")


if __name__ == "__main__":
    main()
