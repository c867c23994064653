"""A keras_hub causal LM fine-tuned with LoRA, as a user's script: what benchmarks/gpu_check.sh runs under
`acceltrain run` on the GPU (throughput, the ledger's MFU, peak memory) and what `acceltrain plan --target here`
plans (`--model benchmarks/lm_finetune_script.py:model`).

Gemma 2B's shapes (tests/presets/gemma_2b: 8 query heads and one key/value head of 256, width 2048, MLP 16384, its
256,000-token vocabulary) with fewer layers, so that a run fits a few minutes of a lent GPU; random weights built
from the config (nothing downloads), LoRA of rank 4 on the attention (`backbone.enable_lora(4)`, the keras_hub
fine-tuning guide's), AdamW. The data is synthetic: sequences that count in steps of 1, 2, 3 or 5 (the losses are
recorded, not judged: a few hundred LoRA steps on random weights measure speed, not learning).

    acceltrain run benchmarks/lm_finetune_script.py --steps 300 --out lm.json     # 3 epochs of 100 steps of batch 8
    python benchmarks/lm_finetune_script.py --layers 1 --steps 6 --sequence-length 32 --vocabulary 512   # a CPU smoke run

--out writes, from this run's own measurement: the median seconds of the steps after the first (which compiles),
tokens a second, the losses, the parameter counts and the device's peak bytes in use (JAX's memory_stats, where the
device reports it).
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

GEMMA_2B = dict(num_query_heads=8, num_key_value_heads=1, hidden_dim=2048, intermediate_dim=16384, head_dim=256)
COUNTING_STEPS = (1, 2, 3, 5)
# plan's --model builds with these: the CLI passes shapes through its flags (--sequence-length, --batch-size)
LAYERS, VOCABULARY, LORA_RANK = 6, 256_000, 4


def model(layers: int = LAYERS, vocabulary: int = VOCABULARY):
    """The compiled GemmaCausalLM: Gemma 2B's shapes with `layers` layers, LoRA of rank 4, AdamW."""
    import keras
    import keras_hub

    backbone = keras_hub.models.GemmaBackbone(vocabulary_size=vocabulary, num_layers=layers, **GEMMA_2B)
    backbone.enable_lora(LORA_RANK)
    lm = keras_hub.models.GemmaCausalLM(backbone=backbone, preprocessor=None)
    lm.compile(optimizer=keras.optimizers.AdamW(1e-3, weight_decay=0.01),
               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
               weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    return lm


def counting(sequences: int, length: int, vocabulary: int, seed: int = 0):
    """Token ids and a padding mask, and the next tokens: each row counts from a random start by a random step."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, vocabulary, size=(sequences, 1))
    step = rng.choice(COUNTING_STEPS, size=(sequences, 1))
    tokens = ((start + step * np.arange(length + 1)) % vocabulary).astype(np.int32)
    x = {"token_ids": tokens[:, :-1], "padding_mask": np.ones((sequences, length), dtype=np.int32)}
    return x, tokens[:, 1:]


class StepTimes:
    """Seconds between the ends of consecutive steps (a Keras callback; Keras syncs each step's logs on the host)."""

    def __init__(self):
        import keras

        outer = self

        class Callback(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                outer.ends.append(time.perf_counter())

        self.ends: list[float] = []
        self.callback = Callback()

    def steady_median(self) -> float | None:
        """The median of the steps after the first two (the first compiles; the second may still warm up)."""
        gaps = np.diff(self.ends)[1:]
        return float(statistics.median(gaps)) if len(gaps) else None


def peak_bytes() -> int | None:
    """The first device's peak bytes in use since the process began (None where the backend does not say)."""
    import keras

    if keras.backend.backend() != "jax":
        return None
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--vocabulary", type=int, default=VOCABULARY)
    parser.add_argument("--steps", type=int, default=300, help="steps in all, over --epochs")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--sequence-length", type=int, default=512)
    parser.add_argument("--policy", help="set Keras's global dtype policy first, e.g. mixed_bfloat16 (default: leave it)")
    parser.add_argument("--out", help="write the measurements as JSON here")
    args = parser.parse_args(argv)
    if args.policy:
        import keras

        keras.config.set_dtype_policy(args.policy)

    lm = model(args.layers, args.vocabulary)
    x, y = counting(args.steps // args.epochs * args.batch_size, args.sequence_length, args.vocabulary)
    times = StepTimes()
    started = time.perf_counter()
    history = lm.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, callbacks=[times.callback], verbose=2)
    seconds = time.perf_counter() - started
    step = times.steady_median()
    result = {
        "layers": args.layers, "vocabulary": args.vocabulary, "lora_rank": LORA_RANK, "steps": args.steps // args.epochs * args.epochs, "epochs": args.epochs,
        "batch_size": args.batch_size, "sequence_length": args.sequence_length,
        "parameters": int(lm.count_params()),
        "trainable_parameters": int(sum(np.prod(w.shape) for w in lm.trainable_weights)),
        "dtype_policy": lm.dtype_policy.name,
        "fit_seconds": round(seconds, 3), "first_step_seconds": round(times.ends[0] - started, 3),
        "steady_step_seconds": step,
        "tokens_per_second": args.batch_size * args.sequence_length / step if step else None,
        "loss": [float(v) for v in history.history["loss"]],
        "accuracy": [float(v) for v in history.history["accuracy"]],
        "peak_bytes_in_use": peak_bytes(),
    }
    print(json.dumps(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
