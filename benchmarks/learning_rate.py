"""Which learning rate makes the seed's MNIST recipe converge on every seed? Test accuracy per seed.

    python benchmarks/learning_rate.py [--seeds 0 1 2 3 4]

Trains the seed's MLP (20 epochs × 50 steps, global batch 1200, JAX backend, one device) with each
candidate and writes the table to BENCHMARKS.md (section "learning-rate").
"""

import argparse
import sys
import time

import acceltrain
from _report import machine, write_section

CANDIDATES = {
    "RMSprop 1e-2 constant (the seed)": 1e-2,
    "RMSprop 1e-3 constant": 1e-3,
    "RMSprop cosine 1e-3 → 0 (the default)": None,
    "RMSprop cosine 2e-3 → 0": ("cosine", 2e-3),
}


def build(runtime, setting):
    import keras

    from acceltrain.recipes import mnist_mlp

    with runtime.scope():
        if isinstance(setting, tuple):
            model = mnist_mlp.build_model(learning_rate=keras.optimizers.schedules.CosineDecay(setting[1], 1000))
        else:
            model = mnist_mlp.build_model(learning_rate=setting)
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = parser.parse_args()
    runtime = acceltrain.connect()
    import keras

    from acceltrain.datasets import load_npz
    from acceltrain.recipes import mnist_mlp

    splits = load_npz()
    x, y = mnist_mlp.preprocess(splits.x_train, splits.y_train)
    xt, yt = mnist_mlp.preprocess(splits.x_test, splits.y_test)
    rows = []
    for label, setting in CANDIDATES.items():
        accuracies = []
        for seed in args.seeds:
            keras.utils.set_random_seed(seed)
            model = build(runtime, setting)
            start = time.perf_counter()
            try:
                runtime.fit(model, x, y, batch_size=1200, epochs=20, verbose=0)
                accuracy = runtime.evaluate(model, xt, yt, batch_size=1200, verbose=0)["accuracy"]
            except acceltrain.TrainingDiverged:
                # Measure what the seed would have reported: train on without the check.
                keras.utils.set_random_seed(seed)
                model = build(runtime, setting)
                model.fit(x, y, batch_size=1200, epochs=20, verbose=0)
                accuracy = model.evaluate(xt, yt, batch_size=1200, verbose=0, return_dict=True)["accuracy"]
            accuracies.append(accuracy)
            print(f"{label} seed {seed}: {accuracy:.4f} ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
        rows.append((label, accuracies))
    seeds = " | ".join(f"seed {s}" for s in args.seeds)
    table = [f"| setting | {seeds} | min |", "|---" * (len(args.seeds) + 2) + "|"]
    for label, accuracies in rows:
        cells = " | ".join(f"{100 * a:.1f}" for a in accuracies)
        table.append(f"| {label} | {cells} | {100 * min(accuracies):.1f} |")
    write_section(
        "learning-rate",
        "## The MNIST recipe's learning rate: test accuracy (%) per seed\n\n"
        f"`python benchmarks/learning_rate.py` on {machine()}, {runtime}. 20 epochs × 50 steps, global batch 1200.\n\n"
        + "\n".join(table),
    )


if __name__ == "__main__":
    main()
