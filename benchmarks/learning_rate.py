"""Which learning rate makes the seed's MNIST recipe converge on every seed? Test accuracy per seed.

    python benchmarks/learning_rate.py [--seeds 0 1 2 3 4] [--quick] [--results DIR]

Runs the `acceltrain train` job itself (20 epochs × 50 steps, global batch 1200, JAX, this machine's
devices) for each candidate and seed, in this process, and writes its record (results/learning-rate.json).
A diverged run is recorded as what it would have scored had nobody stopped it. --quick: seed 0, 1 epoch.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _results  # noqa: E402

SECTION = "learning-rate"
# label → (constant learning rate or None for the recipe's schedule, the schedule's peak)
CANDIDATES = {
    "RMSprop 1e-2 constant (the seed)": (1e-2, None),
    "RMSprop 1e-3 constant": (1e-3, None),
    "RMSprop cosine 1e-3 → 0": (None, 1e-3),
    "RMSprop cosine 2e-3 → 0 (the default)": (None, 2e-3),
}


# --- Measuring ----------------------------------------------------------------------------------

def accuracy(config) -> tuple[float, bool]:
    """The test accuracy, and whether the divergence check stopped the run (then: what it scores unwatched)."""
    import acceltrain
    from acceltrain.commands.train import train_and_evaluate

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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    import acceltrain
    from acceltrain.commands.train import TrainConfig
    from acceltrain.recipes import mnist_mlp

    seeds = [0] if args.quick else args.seeds
    epochs = 1 if args.quick else mnist_mlp.EPOCHS
    settings = []
    default_peak = mnist_mlp.PEAK_LEARNING_RATE
    with tempfile.TemporaryDirectory() as scratch:
        for label, (constant, peak) in CANDIDATES.items():
            found = {"label": label, "constant_learning_rate": constant, "peak_learning_rate": peak,
                     "accuracy": [], "diverged": [], "seconds": []}
            mnist_mlp.PEAK_LEARNING_RATE = peak or default_peak
            for seed in seeds:
                started = time.perf_counter()
                # validation_split=0: the job as these records were measured, all 60,000 samples trained on
                config = TrainConfig(seed=seed, learning_rate=constant, epochs=epochs, validation_split=0,
                                     out=str(Path(scratch) / f"{len(settings)}-{seed}"))
                score, stopped = accuracy(config)
                found["accuracy"].append(score)
                found["seconds"].append(round(time.perf_counter() - started, 1))
                if stopped:
                    found["diverged"].append(seed)
                print(f"{label} seed {seed}: {score:.4f} ({found['seconds'][-1]:.0f} s)", file=sys.stderr, flush=True)
            settings.append(found)
    mnist_mlp.PEAK_LEARNING_RATE = default_peak
    runtime = acceltrain.connect(verbose=False)
    run.save(SECTION, {"epochs": epochs, "steps_per_epoch": 60000 // mnist_mlp.BATCH_SIZE,
                       "batch_size": mnist_mlp.BATCH_SIZE, "runtime": str(runtime), "seeds": seeds,
                       "settings": settings})


# --- Rendering ----------------------------------------------------------------------------------

def summarize(raw: dict) -> dict:
    keep = ("epochs", "steps_per_epoch", "batch_size", "runtime", "seeds")
    return {**{key: raw[key] for key in keep},
            "settings": [{key: s[key] for key in ("label", "accuracy", "diverged")} for s in raw["settings"]]}


def findings(settings: list[dict], seeds: list[int]) -> str:
    """What this run's table shows, in words: each sentence computed from it, none fixed in advance."""
    sentences = []
    for setting in settings:
        if setting["diverged"]:
            sentences.append(f"{setting['label']} diverged on {len(setting['diverged'])} of {len(seeds)} seeds "
                             f"({', '.join(f'seed {s}' for s in setting['diverged'])}).")
    if not any(setting["diverged"] for setting in settings):
        sentences.append("No setting diverged on any seed in this run.")
    best_min = max(min(s["accuracy"]) for s in settings)
    safest = [s["label"] for s in settings if min(s["accuracy"]) == best_min]
    sentences.append(f"The highest worst-seed score, {100 * best_min:.1f} %, is {' and '.join(safest)}'s.")
    best = [max(s["accuracy"][i] for s in settings) for i in range(len(seeds))]
    everywhere = [s["label"] for s in settings if all(a >= b - 0.0005 for a, b in zip(s["accuracy"], best))]
    if everywhere:
        sentences.append(f"Within 0.05 points of the best on every seed: {', '.join(everywhere)}.")
    return " ".join(sentences)


def render(summary: dict, record: dict) -> str:
    seeds = summary["seeds"]
    table = [f"| setting | {' | '.join(f'seed {s}' for s in seeds)} | min |", "|---" * (len(seeds) + 2) + "|"]
    for s in summary["settings"]:
        table.append(f"| {s['label']} | {' | '.join(f'{100 * a:.1f}' for a in s['accuracy'])} | "
                     f"{100 * min(s['accuracy']):.1f} |")
    return (
        "## The MNIST recipe's learning rate: test accuracy (%) per seed\n\n"
        f"`{record['command']}`: the `acceltrain train` job, {summary['epochs']} epochs × {summary['steps_per_epoch']} "
        f"steps, global batch {summary['batch_size']}, {summary['runtime']}. A diverged run was stopped by the "
        "divergence check; its figure is what the run scores if left to finish. "
        f"{findings(summary['settings'], seeds)}\n\n" + "\n".join(table)
    )


# Quotes whose figures a busy machine does not change (accuracies over seeds):
# quoted from a loaded record too (render.py).
LOAD_FREE = ("seeds",)


def quotes(summary: dict, record: dict) -> dict:
    """`seeds`: each setting's scores in one sentence, for README and the docs."""
    parts = []
    for s in summary["settings"]:
        kept = [a for seed, a in zip(summary["seeds"], s["accuracy"]) if seed not in s["diverged"]]
        if s["diverged"]:
            lost = [a for seed, a in zip(summary["seeds"], s["accuracy"]) if seed in s["diverged"]]
            part = (f"{s['label']} diverged on {len(lost)} of {len(summary['seeds'])} seeds "
                    f"({' and '.join(f'{100 * a:.1f} %' for a in lost)}, left to finish)")
            parts.append(part + (f" and scored {_results.span([100 * a for a in kept])} on the others" if kept else ""))
        else:
            parts.append(f"{s['label']} scored {_results.span([100 * a for a in kept])}")
    epochs = f"{summary['epochs']} epoch{'s' if summary['epochs'] != 1 else ''}"
    return {"seeds": (f"Test accuracy over {_results.seeds_phrase(summary['seeds'])}, {epochs} each "
                      f"({_results.cite(record)}): " + "; ".join(parts) + ".")}


if __name__ == "__main__":
    main()
