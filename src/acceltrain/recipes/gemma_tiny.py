"""A small keras_hub Gemma causal LM, built from a config (random weights, offline: only `from_preset`
downloads), trained on a synthetic next-token task it can learn. Runs with every distribution; under
'model' the weights are laid out by Gemma's own `get_layout_map`.

The task: each sequence counts from a random start in steps of 1, 2, 3 or 5, modulo the vocabulary
(7, 9, 11, 13 ...). From the second token on, the next one follows from the last two, so token
accuracy can approach (SEQUENCE - 1 + 1/4) / SEQUENCE; the first prediction is a guess of the step.

The shapes are Gemma's (multi-query attention: one key/value head, as Gemma 2B), shrunk to train in
seconds on a CPU: one key/value head does not divide over a model axis, so that kernel stays whole
under 'model' (a warning says so) while the rest is cut.
"""

import numpy as np

from acceltrain.datasets import Splits

NAME = "gemma-tiny"
EPOCHS = 4
BATCH_SIZE = 64
PEAK_LEARNING_RATE = 3e-3
SEQUENCE = 32
STEPS = (1, 2, 3, 5)
TRAIN_SEQUENCES, TEST_SEQUENCES = 4096, 512
CONFIG = dict(vocabulary_size=128, num_layers=2, num_query_heads=4, num_key_value_heads=1, hidden_dim=128,
              intermediate_dim=512, head_dim=32)


def make_splits(seed: int = 0) -> Splits:
    """Counting sequences of SEQUENCE + 1 tokens: x the tokens, y the same shifted by one (next tokens)."""
    rng = np.random.default_rng(seed)

    def sequences(count):
        start = rng.integers(0, CONFIG["vocabulary_size"], size=(count, 1))
        step = rng.choice(STEPS, size=(count, 1))
        tokens = (start + step * np.arange(SEQUENCE + 1)) % CONFIG["vocabulary_size"]
        return tokens[:, :-1].astype(np.int32), tokens[:, 1:].astype(np.int32)

    return Splits(*sequences(TRAIN_SEQUENCES), *sequences(TEST_SEQUENCES))


def preprocess(x: np.ndarray, y: np.ndarray):
    """Gemma's inputs: token ids and a padding mask (no padding here); labels are the next tokens."""
    if x.ndim != 2 or x.shape != y.shape:
        raise ValueError(f"expected token ids and next tokens of equal shape (samples, length), got {x.shape}, {y.shape}")
    return {"token_ids": x.astype(np.int32), "padding_mask": np.ones_like(x, dtype=np.int32)}, y.astype(np.int32)


def build_model(*, learning_rate: float | None = None, total_steps: int = EPOCHS * TRAIN_SEQUENCES // BATCH_SIZE):
    """GemmaCausalLM from CONFIG, no preprocessor, compiled with AdamW and token accuracy as "accuracy"."""
    import keras
    import keras_hub

    backbone = keras_hub.models.GemmaBackbone(**CONFIG)
    model = keras_hub.models.GemmaCausalLM(backbone=backbone, preprocessor=None)
    if learning_rate is None:
        learning_rate = keras.optimizers.schedules.CosineDecay(PEAK_LEARNING_RATE, decay_steps=total_steps)
    model.compile(
        optimizer=keras.optimizers.AdamW(learning_rate=learning_rate, weight_decay=0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    return model


def layout_map(device_mesh):
    """Gemma's own layouts (keras_hub), for distribution='model'."""
    import keras_hub

    return keras_hub.models.GemmaBackbone.get_layout_map(device_mesh)
