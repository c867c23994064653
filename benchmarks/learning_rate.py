"""Which learning rate makes the seed's MNIST recipe converge on every seed? Test accuracy per seed.

    python benchmarks/learning_rate.py [--seeds 0 1 2 3 4]

Runs the `acceltrain train` job itself (20 epochs × 50 steps, global batch 1200, JAX, this machine's
devices) for each candidate and seed, in this process, and writes the table to BENCHMARKS.md (section
"learning-rate"). A diverged run is reported as what it would have scored had nobody stopped it.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import acceltrain
from _report import machine, write_section
from acceltrain.commands.train import TrainConfig, train_and_evaluate
from acceltrain.recipes import mnist_mlp

# label → (constant learning rate or None for the recipe's schedule, the schedule's peak)
CANDIDATES = {
    "RMSprop 1e-2 constant (the seed)": (1e-2, None),
    "RMSprop 1e-3 constant": (1e-3, None),
    "RMSprop cosine 1e-3 → 0": (None, 1e-3),
    "RMSprop cosine 2e-3 → 0 (the default)": (None, 2e-3),
}


def accuracy(config: TrainConfig) -> tuple[float, bool]:
    """The test accuracy, and whether the divergence check stopped the run (then: what it scores unwatched)."""
    try:
        return train_and_evaluate(config)["test_accuracy"], False
    except acceltrain.TrainingDiverged:
        # What the seed would have reported: the same run with nobody watching the loss.
        from acceltrain.training import callbacks

        callbacks.DivergenceCheck.PATIENCE = 10**9
        try:
            config.out += "-unwatched"
            return train_and_evaluate(config)["test_accuracy"], True
        finally:
            callbacks.DivergenceCheck.PATIENCE = 2


def findings(rows: list[tuple[str, list[float], list[int]]], seeds: list[int]) -> str:
    """What this run's table shows, in words: each sentence computed from it, none fixed in advance."""
    sentences = []
    for label, found, diverged in rows:
        if diverged:
            sentences.append(f"{label} diverged on {len(diverged)} of {len(seeds)} seeds "
                             f"({', '.join(f'seed {s}' for s in diverged)}).")
    if not any(diverged for _, _, diverged in rows):
        sentences.append("No setting diverged on any seed in this run.")
    best_min = max(min(found) for _, found, _ in rows)
    safest = [label for label, found, _ in rows if min(found) == best_min]
    sentences.append(f"The highest worst-seed score, {100 * best_min:.1f} %, is {' and '.join(safest)}'s.")
    everywhere = [label for label, found, _ in rows
                  if all(found[i] >= max(f[i] for _, f, _ in rows) - 0.0005 for i in range(len(seeds)))]
    if everywhere:
        sentences.append(f"Within 0.05 points of the best on every seed: {', '.join(everywhere)}.")
    return " ".join(sentences)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for label, (constant, peak) in CANDIDATES.items():
            found, diverged = [], []
            for seed in args.seeds:
                if peak is not None:
                    mnist_mlp.PEAK_LEARNING_RATE = peak
                started = time.perf_counter()
                config = TrainConfig(seed=seed, learning_rate=constant, out=str(Path(scratch) / f"{len(rows)}-{seed}"))
                score, stopped = accuracy(config)
                found.append(score)
                if stopped:
                    diverged.append(seed)
                print(f"{label} seed {seed}: {found[-1]:.4f} ({time.perf_counter() - started:.0f} s)",
                      file=sys.stderr, flush=True)
            rows.append((label, found, diverged))
    runtime = acceltrain.connect(verbose=False)
    seeds = " | ".join(f"seed {s}" for s in args.seeds)
    table = [f"| setting | {seeds} | min |", "|---" * (len(args.seeds) + 2) + "|"]
    for label, found, _ in rows:
        table.append(f"| {label} | {' | '.join(f'{100 * a:.1f}' for a in found)} | {100 * min(found):.1f} |")
    write_section(
        "learning-rate",
        "## The MNIST recipe's learning rate: test accuracy (%) per seed\n\n"
        f"`python benchmarks/learning_rate.py`: the `acceltrain train` job, 20 epochs × 50 steps, global batch "
        f"1200, on {machine()}, {runtime}. A diverged run was stopped by the divergence check; its figure is "
        f"what the run scores if left to finish. {findings(rows, args.seeds)}\n\n"
        + "\n".join(table),
    )


if __name__ == "__main__":
    main()
