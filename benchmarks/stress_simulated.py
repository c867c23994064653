"""Do simulated devices hold up? The default job, a small convnet and a convnet with RandomCrop inside the model,
each run N times back to back on 8 simulated CPU devices, counting how many finished, against one run of each on 1
device.

    python benchmarks/stress_simulated.py [--runs 10] [--devices 8] [--epochs E] [--timeout 1800] [--quick]

Each run is a fresh `acceltrain` process, as a user starts it: `acceltrain train --simulate-devices 8`
(the default job; `--epochs` shortens it) and `acceltrain run --simulate-devices 8
tests/scripts/small_convnet.py` (2 epochs on 6,400 MNIST images), and the same with
tests/scripts/in_model_augmentation.py (RandomCrop as the model's first layer, which Keras runs op by op; 2 epochs on
1,280 MNIST images). A run that exits non-zero counts as failed (134: XLA's abort), one past `--timeout` as hung. Records the section "stress-simulated". Not a test:
it takes many minutes, and the counts it reports are what this machine did in this run. --quick: 1 run
of each, 1 epoch of the default job.
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

from benchmarks import _results  # noqa: E402

SECTION = "stress-simulated"
REPO = _results.REPO
CONVNET = REPO / "tests" / "scripts" / "small_convnet.py"
AUGMENTING = REPO / "tests" / "scripts" / "in_model_augmentation.py"  # RandomCrop in the model: Keras runs it op by op
DEFAULT_JOB = "default job (`acceltrain train`)"
CONVNET_JOB = "small convnet (`acceltrain run tests/scripts/small_convnet.py`)"
AUGMENTING_JOB = ("three-convolution convnet with in-model RandomCrop "
                  "(`acceltrain run tests/scripts/in_model_augmentation.py`)")
# A job whose script now trains another model: its name in older records → what it was. Its figures are of that model,
# so no quote gives them, and BENCHMARKS.md says so under the table, until a rerun records the job as it is now.
SUPERSEDED = {"convnet with in-model RandomCrop (`acceltrain run tests/scripts/in_model_augmentation.py`)":
              "the RandomCrop convnet of two convolutions and Adam at its default rate, which trained to chance on 1 and "
              "8 devices alike (its script now has a third convolution and Adam 3e-3, and learns)"}


def acceltrain(*args, timeout: float):
    """(outcome, seconds, stdout, stderr) of `acceltrain ARGS` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p),
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("XLA_FLAGS", None)
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "acceltrain", *map(str, args)], env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "hung", time.perf_counter() - started, "", ""
    outcome = "finished" if done.returncode == 0 else f"exit {done.returncode}"
    return outcome, time.perf_counter() - started, done.stdout, done.stderr


def default_job(devices: int, epochs: int | None, folder: Path, timeout: float):
    args = ["train", "--out", folder, "--seed", "0", "--quiet"]
    args += ["--simulate-devices", devices] if devices > 1 else []
    args += ["--epochs", epochs] if epochs else []
    outcome, seconds, _, stderr = acceltrain(*args, timeout=timeout)
    accuracy = None
    if outcome == "finished":
        accuracy = json.loads((folder / "metrics.json").read_text())["test_accuracy"]
    return outcome, seconds, accuracy, stderr


def script(path: Path, devices: int, timeout: float):
    outcome, seconds, stdout, stderr = acceltrain("run", "--simulate-devices", devices, path, timeout=timeout)
    lines = [line for line in stdout.splitlines() if line.startswith("test accuracy:")]
    accuracy = float(lines[-1].split(":")[1]) if outcome == "finished" and lines else None
    return outcome, seconds, accuracy, stderr


def _kept(result, load=None) -> dict:
    outcome, seconds, accuracy, stderr = result
    kept = {"outcome": outcome, "seconds": round(seconds, 1), "accuracy": accuracy}
    if load is not None:
        kept["load"] = load
    if outcome != "finished":
        kept["stderr_tail"] = stderr[-1500:]
    return kept


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--epochs", type=int, help="epochs of the default job (default: the recipe's)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds after which a run counts as hung")
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    runs, epochs = (1, 1) if args.quick else (args.runs, args.epochs)

    jobs = {DEFAULT_JOB: lambda devices, folder: default_job(devices, epochs, folder, args.timeout),
            CONVNET_JOB: lambda devices, _: script(CONVNET, devices, args.timeout),
            AUGMENTING_JOB: lambda devices, _: script(AUGMENTING, devices, args.timeout)}
    found = {name: {"one_device": None, "runs": []} for name in jobs}
    with tempfile.TemporaryDirectory() as scratch:
        for index, (name, job) in enumerate(jobs.items()):  # 1 device first: the accuracy to match
            found[name]["one_device"] = _kept(job(1, Path(scratch) / f"one-{index}"))
            print(f"{name}, 1 device: {found[name]['one_device']}", file=sys.stderr, flush=True)
        for run_index in range(runs):  # back to back, alternating
            for index, (name, job) in enumerate(jobs.items()):
                load = _results.load_average()  # as each run starts: how busy the machine was
                result = _kept(job(args.devices, Path(scratch) / f"run-{run_index}-{index}"), load)
                found[name]["runs"].append(result)
                print(f"{name}, run {run_index + 1}: {result}", file=sys.stderr, flush=True)
    run.save(SECTION, {"runs": runs, "devices": args.devices, "epochs": epochs, "timeout": args.timeout,
                       "jobs": found})


# --- Rendering ----------------------------------------------------------------------------------

def summarize(raw: dict) -> dict:
    jobs = {}
    for name, job in raw["jobs"].items():
        outcomes = [r["outcome"] for r in job["runs"]]
        accuracies = [r["accuracy"] for r in job["runs"] if r["accuracy"] is not None]
        jobs[name] = {"finished": outcomes.count("finished"), "runs": len(outcomes),
                      "failed": sorted(o for o in outcomes if o != "finished"),
                      "accuracy": {"mean": statistics.mean(accuracies), "min": min(accuracies),
                                   "max": max(accuracies)} if accuracies else None,
                      "one_device": job["one_device"]["accuracy"],
                      "median_seconds": statistics.median(r["seconds"] for r in job["runs"])}
    loads = [r["load"] for job in raw["jobs"].values() for r in job["runs"]]
    return {"runs": raw["runs"], "devices": raw["devices"], "epochs": raw["epochs"], "jobs": jobs,
            "loads": [min(loads), max(loads)]}


def _jobs(summary: dict, epochs: str) -> str:
    """The jobs the run had, in words (a record from before the RandomCrop job has two)."""
    words = {DEFAULT_JOB: f"the default job ({epochs}, seed 0)",
             CONVNET_JOB: "a small convnet (2 epochs on 6,400 MNIST images)",
             AUGMENTING_JOB: "a convnet of three convolutions with RandomCrop inside the model (2 epochs on 1,280 "
                             "MNIST images)",
             **{name: "a convnet with RandomCrop inside the model (2 epochs on 1,280 MNIST images)"
                for name in SUPERSEDED}}
    said = [words.get(name, name) for name in summary["jobs"]]
    return ", ".join(said[:-1]) + " and " + said[-1] if len(said) > 1 else said[0]


def render(summary: dict, record: dict) -> str:
    devices = summary["devices"]
    rows = []
    for name, job in summary["jobs"].items():
        accuracy, one = job["accuracy"], job["one_device"]
        span = (f"{100 * accuracy['mean']:.2f} ({100 * accuracy['min']:.2f}–{100 * accuracy['max']:.2f})"
                if accuracy else "–")
        gap = f"{100 * (accuracy['mean'] - one):+.2f}" if accuracy and one is not None else "–"
        rows.append(f"| {name} | {job['finished']}/{job['runs']} | {', '.join(job['failed']) or 'none'} | {span} | "
                    f"{'–' if one is None else f'{100 * one:.2f}'} | {gap} | {job['median_seconds']:.0f} |")
    epochs = f"{summary['epochs']} epoch(s)" if summary["epochs"] else "the recipe's epochs"
    finished = sum(job["finished"] for job in summary["jobs"].values())
    total = sum(job["runs"] for job in summary["jobs"].values())
    return f"""## Simulated devices under stress: runs that finished on {devices} simulated CPU devices

`{record['command']}`. Each run a fresh process, back to back: {_jobs(summary, epochs)}, {devices} simulated
devices, against one run of each on 1 device. The
runs started at {_results.load_range(summary['loads'], record['machine'].get('cores'))}. {finished} of {total} runs
finished.

| job | finished | failures (exit code; 134 is XLA's abort) | test accuracy % on {devices}, mean (min–max) | on 1 device | difference, points | median seconds a run |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}{_superseded(summary, record)}"""


def _superseded(summary: dict, record: dict) -> str:
    """Under the table: each job of the record whose script now trains another model (SUPERSEDED)."""
    old = [f"the {name} row is of {SUPERSEDED[name]}" for name in summary["jobs"] if name in SUPERSEDED]
    return (f"\n\nNot what the scripts hold now: {'; '.join(old)}. README and the manual quote none of its figures "
            f"until a rerun, `{record['command']}`.") if old else ""


# Quotes whose figures a busy machine does not change (finished runs and accuracies):
# quoted from a loaded record too (render.py).
LOAD_FREE = ("summary",)


def quotes(summary: dict, record: dict) -> dict:
    """`summary`: each job's count of finished runs and its accuracy against 1 device."""
    parts = []
    for name, job in summary["jobs"].items():
        if name in SUPERSEDED:
            parts.append(f"the {name}'s figures are of a model its script no longer trains (BENCHMARKS.md says which): "
                         f"they wait for a rerun, `{record['command']}`")
            continue
        accuracy, one = job["accuracy"], job["one_device"]
        scored = ""
        if accuracy:
            scored = (f", test accuracy {_results.span([100 * accuracy['min'], 100 * accuracy['max']], '{:.2f}')}"
                      + ("" if one is None else f" ({100 * one:.2f} % on 1 device)"))
        parts.append(f"the {name} finished {job['finished']} of {job['runs']} runs{scored}")
    epochs = (f"the default job shortened to {summary['epochs']} epoch(s)" if summary["epochs"]
              else "the default job at the recipe's epochs")
    return {"summary": f"On {summary['devices']} simulated devices, {epochs} ({_results.cite(record)}): "
                       + "; ".join(parts) + "."}


if __name__ == "__main__":
    main()
