"""The job README's first command runs, `acceltrain train` (checkpoints: auto), per steady epoch beside the
hand-written JAX loop and plain Keras on TensorFlow; what a checkpoint every epoch would cost it; and what the time
ledger costs it.

    python benchmarks/default_job.py [--epochs 5] [--repeats 3] [--quick]

What runs, each in its own Python process, interleaved round by round (so a neighbour's load falls on all alike):
  train:     `acceltrain train --epochs E --out TMP`, as README runs it (the recipe's batch, --checkpoint-every
             auto); its epochs from metrics.json (an epoch's time runs from the previous one's end: its
             checkpoint counts in it), and its ledger;
  every-epoch: the same with --checkpoint-every 1: what a checkpoint every epoch costs this job;
  no-ledger: the same with ACCELTRAIN_LEDGER=0 (the ledger records nothing): the ledger's overhead is
             train / no-ledger - 1, of the median steady epoch (the time of the steps);
  hand:      `acceltrain bench`'s hand-written jitted JAX loop (one lax.scan an epoch, the data on the device once);
  plain:     `acceltrain bench`'s plain Keras fit on TensorFlow with Keras's defaults;
  validated: once, `acceltrain train --epochs E` as README runs it (validation split 0.1, checkpoints auto): its
             ledger's validation (and the final evaluate) per sample over a training step's per sample, bound 2x
             (issue 43), and the programs it compiled, bound 8;
  own cost:  once, the default job's Runtime.fit with every function of the ledger's recording timed from inside
             (LedgerWatch's callbacks, the Timeline's add/begin/end/count/book): their seconds over the ledger's
             device steps; apart, the one read of the step's FLOPs at the first epoch's end (a trace of the step). On a shared machine this ratio holds where the A/B above
             drowns in the load (both sides of it slow alike).
A run's steady epochs are its epochs from the second on (the first compiles); each variant's figure is the median of all its runs'
steady epochs, its noise the spread of its runs' medians (benchmarks/_noise.py). --quick: 2 epochs on 2,400
samples, 1 round.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _noise, _results  # noqa: E402

SECTION = "default-job"
VARIANTS = ("train", "no-ledger", "every-epoch", "hand", "plain")  # the order of each round
LABELS = {"train": "`acceltrain train` (checkpoints: auto)", "no-ledger": "the same, ACCELTRAIN_LEDGER=0",
          "every-epoch": "the same, `--checkpoint-every 1` (a checkpoint every epoch)",
          "hand": "hand-written JAX loop", "plain": "plain Keras fit on TensorFlow"}
# The `acceltrain train` variants: their extra flags. The every-epoch variant shows what a checkpoint every epoch
# costs the steady epoch, the rest of the loop being the same.
TRAIN_FLAGS = {"train": [], "no-ledger": [], "every-epoch": ["--checkpoint-every", "1"]}
# The bounds (#23): the default job within 1.10x the hand loop, not slower than plain Keras; the ledger's
# overhead at most 1 % of step time.
HAND_BOUND, LEDGER_BOUND = 1.10, 0.01
# Issue 43's: an evaluated sample at most 2x a trained one's cost (the ledger's evaluation over its device steps, each
# a sample), and at most 8 compiled programs in the job as README runs it.
VALIDATION_BOUND, PROGRAMS_BOUND = 2.0, 8


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=8, help="epochs a run (steady: the second on)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; each runs every variant once")
    _results.add_arguments(parser)
    args = parser.parse_args()
    record = _results.Run(__file__, args)
    epochs, repeats = (2, 1) if args.quick else (args.epochs, args.repeats)
    raw = measure(epochs, repeats, samples=2400 if args.quick else None)
    raw["validated"] = validated(epochs, 2400 if args.quick else None)
    raw["own_cost"] = _own_cost_child(epochs, 2400 if args.quick else None)
    print(render(summarize(raw), {"command": record.command}))
    record.save(SECTION, raw)


# --- Measuring ----------------------------------------------------------------------------------

def measure(epochs: int, repeats: int, samples: int | None) -> dict:
    from acceltrain import recipes
    from acceltrain.commands import bench

    recipe = recipes.get("mnist-mlp")
    runs = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="acceltrain-default-job-") as folder:
        folder = Path(folder)
        data = _small_data(folder, samples) if samples else None
        config = bench.BenchConfig(epochs=epochs, repeats=repeats, samples=samples)
        for round_ in range(repeats):
            for name in VARIANTS:
                print(f"default-job: {LABELS[name]}, round {round_ + 1} of {repeats}", file=sys.stderr, flush=True)
                if name in TRAIN_FLAGS:
                    runs[name].append(_train(folder / f"{name}-{round_}", epochs, data, ledger=name != "no-ledger",
                                             flags=TRAIN_FLAGS[name]))
                else:  # in the default job's precision on this machine's platform (float32 on a CPU): one precision
                    first = runs["train"][0]
                    extra = {"compute_dtype": first["compute_dtype"], "platform": first["platform"],
                             "precision": first["precision"]}
                    result = bench._run_child(name, config, recipe.BATCH_SIZE, str(folder / "no-cache"), extra)
                    runs[name].append({"epoch_seconds": result["epoch_seconds"], "backend": result["backend"]})
    return {"epochs": epochs, "repeats": repeats, "samples": samples, "batch_size": recipe.BATCH_SIZE, "runs": runs}


def validated(epochs: int, samples: int | None) -> dict:
    """One `acceltrain train` as README runs it, its validation split kept: its ledger (metrics.json's)."""
    print("default-job: `acceltrain train` with its validation, once", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="acceltrain-default-job-") as folder:
        data = _small_data(Path(folder), samples) if samples else None
        return {"ledger": _train(Path(folder) / "validated", epochs, data, ledger=True, validation=True)["ledger"]}


def _train(out: Path, epochs: int, data: Path | None, *, ledger: bool, flags: list[str] = (),
           validation: bool = False) -> dict:
    """One `acceltrain train` in its own process: its epochs, its ledger, what it computed in."""
    env = {**os.environ, "ACCELTRAIN_LEDGER": "1" if ledger else "0", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("KERAS_BACKEND", None)
    # --validation-split 0: the same work as the hand loop and plain Keras (all the samples trained on, none validated)
    command = [sys.executable, "-m", "acceltrain", "train", "--epochs", str(epochs), "--out", str(out),
               *([] if validation else ["--validation-split", "0"])]
    command += (["--data", str(data)] if data else []) + list(flags)
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"default-job: {' '.join(command)} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    metrics = json.loads((out / "metrics.json").read_text())
    runtime = metrics["runtime"]
    chosen = [line.split("): ", 1)[1] for line in done.stderr.splitlines() if "(--checkpoint-every auto" in line]
    return {"epoch_seconds": metrics["epoch_seconds"], "ledger": metrics.get("ledger"), "auto": chosen[-1:] or None,
            "platform": runtime["platform"], "backend": runtime["backend"], "device_kind": runtime["device_kind"],
            "compute_dtype": _compute_dtype(metrics), "precision": _policy(metrics)}


def _own_cost_child(epochs: int, samples: int | None) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("KERAS_BACKEND", None)
    done = subprocess.run([sys.executable, __file__, OWN_COST, str(epochs), str(samples or 0)], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"default-job: the ledger's own cost failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


OWN_COST = "_own_cost"  # the child's first argument


def own_cost(epochs: int, samples: int | None) -> dict:
    """The default job's Runtime.fit (checkpoints: auto), the seconds spent inside the ledger's recording
    summed (only the outermost of nested calls), and the fit's ledger."""
    import functools

    import acceltrain
    from acceltrain import datasets, ledger, recipes

    runtime = acceltrain.connect(verbose=False)
    from acceltrain.training import ledger_watch

    spent = {"recording": 0.0, "flops": 0.0}
    depth = [0]

    def timed(function, into):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            depth[0] += 1
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0 or into == "flops":  # the outermost call; the FLOPs read, out of its caller's
                    spent[into] += time.perf_counter() - start
                    if depth[0] > 0:
                        spent["recording"] -= time.perf_counter() - start
        return wrapper

    for owner, names in ((ledger.Timeline, ("add", "begin", "end", "count", "note", "book", "first_seen")),
                         (ledger_watch.LedgerWatch, ("on_epoch_begin", "on_epoch_end", "on_train_batch_begin",
                                                     "on_train_batch_end", "on_train_end", "_timed_iterator"))):
        for name in names:
            setattr(owner, name, timed(getattr(owner, name), "recording"))
    ledger_watch.LedgerWatch._note_flops = timed(ledger_watch.LedgerWatch._note_flops, "flops")
    recipe = recipes.get("mnist-mlp")
    splits = datasets.load_npz()
    x, y = recipe.preprocess(splits.x_train, splits.y_train)
    x, y = (x[:samples], y[:samples]) if samples else (x, y)
    with runtime.scope():
        model = recipe.build_model(total_steps=epochs * -(-len(x) // recipe.BATCH_SIZE))
    with tempfile.TemporaryDirectory(prefix="acceltrain-default-job-own-cost-") as folder:
        history = runtime.fit(model, x, y, batch_size=recipe.BATCH_SIZE, epochs=epochs, verbose=0,
                              checkpoint_dir=folder)
    return {"recording_seconds": spent["recording"], "flops_seconds": spent["flops"], "ledger": history.ledger.as_json()}


def _policy(metrics: dict) -> str:
    """The Keras dtype policy acceltrain chose: the first word of its precision decision ("float32 (cpu: ...)")."""
    decision = metrics["runtime"]["decisions"].get("precision") or "float32"
    return str(decision).split(" ", 1)[0]


def _compute_dtype(metrics: dict) -> str:
    """The compute dtype of that policy ("mixed_bfloat16" computes in bfloat16)."""
    return _policy(metrics).removeprefix("mixed_")


def _small_data(folder: Path, samples: int) -> Path:
    """The first `samples` of MNIST's training split (and a slice of its test split) as an .npz, for --quick."""
    import numpy as np

    from acceltrain import datasets

    splits = datasets.load_npz()
    path = folder / "small-mnist.npz"
    np.savez(path, x_train=splits.x_train[:samples], y_train=splits.y_train[:samples],
             x_test=splits.x_test[:samples // 4], y_test=splits.y_test[:samples // 4])
    return path


# --- Rendering ----------------------------------------------------------------------------------

def _steady(run: dict, epochs: int) -> list[float]:
    """A run's epochs from the second to the last it was asked for (the first compiles)."""
    return run["epoch_seconds"][1:epochs] or run["epoch_seconds"][-1:]


def summarize(raw: dict) -> dict:
    """Each variant's median steady epoch and its runs' medians; the ratios, judged; the last ledger's parts."""
    variants = {}
    for name, runs in raw["runs"].items():
        # a variant's figure is the median of its runs' medians, and its noise the spread of those: one statistic
        run_medians = [statistics.median(_steady(run, raw["epochs"])) for run in runs]
        variants[name] = {"median": statistics.median(run_medians), "run_medians": run_medians}

    def judged(a, b, **kwargs):
        ratio = variants[a]["median"] / variants[b]["median"]
        difference = _noise.judge(ratio, (_noise.spread(variants[a]["run_medians"]),
                                          _noise.spread(variants[b]["run_medians"])), **kwargs)
        return {"ratio": ratio, "noise": difference.noise, "verdict": difference.verdict}

    ledgers = [run["ledger"] for run in raw["runs"]["train"] if run.get("ledger")]
    return {
        "epochs": raw["epochs"], "repeats": raw["repeats"], "samples": raw["samples"],
        "batch_size": raw["batch_size"], "variants": variants,
        "train_over_hand": judged("train", "hand"),
        "train_over_plain": judged("train", "plain"),
        "ledger_overhead": judged("train", "no-ledger", adds_work=True),
        "every_epoch_over_train": judged("every-epoch", "train") if "every-epoch" in variants else None,
        "every_epoch_over_hand": judged("every-epoch", "hand") if "every-epoch" in variants else None,
        "ledger": ledgers[-1] if ledgers else None,
        "auto": [run["auto"][0] for run in raw["runs"]["train"] if run.get("auto")],
        "own_cost": _own_share(raw.get("own_cost")),
        "validated": _validation_cost(raw.get("validated")),
    }


def _validation_cost(validated: dict | None) -> dict | None:
    """The validated run's ledger: an evaluated sample's seconds over a trained one's, and the programs compiled."""
    if not validated or not validated.get("ledger"):
        return None
    from acceltrain import ledger

    saved = ledger.Ledger.from_json(validated["ledger"])
    trained, evaluated = saved.per_sample()
    return {"trained": trained, "evaluated": evaluated, "ratio": evaluated / trained if trained and evaluated else None,
            "programs": saved.facts.get("compiles"), "line": saved.line()}


def _own_share(own: dict | None) -> dict | None:
    """The ledger's recording over the device steps it timed, in the same run."""
    if not own:
        return None
    steps = own["ledger"]["parts"]["device_steps"]
    return {"recording_seconds": own["recording_seconds"], "flops_seconds": own.get("flops_seconds"),
            "device_steps_seconds": steps, "share": own["recording_seconds"] / steps if steps else None}


def _says(judged: dict, form: str = "{:.3f}×") -> str:
    return _noise.Difference(judged["ratio"], judged["noise"], judged["verdict"]).says(form)


def render(summary: dict, record: dict) -> str:
    from acceltrain import ledger

    v = summary["variants"]
    lines = [
        "## The default job: `acceltrain train` per steady epoch beside the hand loop and plain Keras; the ledger's "
        "cost",
        "",
        f"`{record['command']}`. Each variant in its own process, interleaved, {summary['repeats']} rounds of "
        f"{summary['epochs']} epochs at batch {summary['batch_size']}"
        + (f" on {summary['samples']} samples" if summary["samples"] else "")
        + f"; each figure is the median of its runs' epochs 2-{summary['epochs']}; the noise, the spread of its runs' "
        "medians.",
        "",
        "| variant | median steady epoch | each run's median |",
        "|---|---|---|",
    ]
    lines += [f"| {LABELS[name]} | {v[name]['median']:.3f} s | "
              + ", ".join(f"{s:.3f}" for s in v[name]["run_medians"]) + " |" for name in VARIANTS if name in v]
    overhead = summary["ledger_overhead"]
    lines += [
        "",
        f"- `acceltrain train` over the hand loop: {_says(summary['train_over_hand'])} (bound: ≤ {HAND_BOUND}×).",
        f"- `acceltrain train` over plain Keras on TensorFlow: {_says(summary['train_over_plain'])} (bound: ≤ 1×).",
    ]
    if summary.get("every_epoch_over_train"):
        lines += [f"- A checkpoint every epoch against 'auto', the rest of the job the same: "
                  f"{_says(summary['every_epoch_over_train'])}; a checkpoint every epoch over the hand loop: "
                  f"{_says(summary['every_epoch_over_hand'])}."]
    if summary.get("auto"):
        lines += ["- What 'auto' chose in each `acceltrain train` run, as it said: "
                  + "; ".join(f"{line.removesuffix('; pass another to choose')}" for line in summary["auto"]) + "."]
    lines += [
        f"- The ledger's cost, the steady epoch with it over without: {_says(overhead)}"
        + (f", {_noise.percent(overhead['ratio'] - 1)} of step time" if overhead["verdict"] == _noise.HIGHER else "")
        + f" (bound: ≤ {_noise.percent(LEDGER_BOUND)}).",
    ]
    own = summary.get("own_cost")
    if own and own["share"] is not None:
        lines.append(f"- The ledger's own recording, timed from inside one run: {own['recording_seconds']:.3f} s over "
                     f"{own['device_steps_seconds']:.1f} s of device steps, {_noise.percent(own['share'])} of step "
                     f"time (bound: ≤ {_noise.percent(LEDGER_BOUND)})"
                     + (f"; once a run, at its first epoch's end, reading the step's FLOPs took {own['flops_seconds']:.2f} s"
                        if own.get("flops_seconds") else "") + ".")
    cost = summary.get("validated")
    if cost and cost["ratio"] is not None:
        lines.append(f"- Validation's cost, one `acceltrain train` run as README runs it (validation split 0.1, the "
                     f"test set evaluated at its end), from its ledger: {cost['evaluated'] * 1e6:,.1f} µs an evaluated "
                     f"sample over {cost['trained'] * 1e6:,.1f} µs a trained one, {cost['ratio']:.2f}× (bound: ≤ "
                     f"{VALIDATION_BOUND:g}×); {cost['programs']} compiled programs (bound: ≤ {PROGRAMS_BOUND}). "
                     f"Its ledger: {cost['line']}.")
    if summary["ledger"]:
        lines += ["", f"The last `acceltrain train` run's ledger: "
                      f"{ledger.Ledger.from_json(summary['ledger']).line()}."]
    return "\n".join(lines)


def quotes(summary: dict, record: dict) -> dict:
    """`train-vs-hand`, `train-vs-plain`, `ledger-overhead`, `every-epoch-vs-train`, `every-epoch-vs-hand`: each ratio
    as the section judges it; `auto-chose`: what the last `acceltrain train` run said 'auto' chose, and why (`auto-chose-all`: every run's);
    `ledger-own-share`: the ledger's recording over step time, timed from inside."""
    return {"train-vs-hand": _says(summary["train_over_hand"]), "train-vs-plain": _says(summary["train_over_plain"]),
            "ledger-overhead": _says(summary["ledger_overhead"]),
            **({"every-epoch-vs-train": _says(summary["every_epoch_over_train"]),
                "every-epoch-vs-hand": _says(summary["every_epoch_over_hand"])}
               if summary.get("every_epoch_over_train") else {}),
            **({"auto-chose": summary["auto"][-1].removesuffix("; pass another to choose"),
                "auto-chose-all": "; ".join(f"{line.removesuffix('; pass another to choose')}" for line in summary["auto"])}
               if summary.get("auto") else {}),
            **({"ledger-own-share": _noise.percent(summary["own_cost"]["share"])}
               if summary.get("own_cost") and summary["own_cost"]["share"] is not None else {})}


if __name__ == "__main__":
    if sys.argv[1:2] == [OWN_COST]:
        print(json.dumps(own_cost(int(sys.argv[2]), int(sys.argv[3]) or None)))
    else:
        main()
