"""Do simulated devices hold up? The default job and a small convnet, each run N times back to back on 8
simulated CPU devices, counting how many finished, against one run of each on 1 device.

    python benchmarks/stress_simulated.py [--runs 10] [--devices 8] [--epochs E] [--timeout 1800]

Each run is a fresh `acceltrain` process, as a user starts it: `acceltrain train --simulate-devices 8`
(the default job; `--epochs` shortens it) and `acceltrain run --simulate-devices 8
tests/scripts/small_convnet.py`. A run that exits non-zero counts as failed (134: XLA's abort), one past
`--timeout` as hung. Writes the section "stress-simulated" of BENCHMARKS.md. Not a test: it takes many
minutes, and the counts it reports are what this machine did in this run.
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

from _report import machine, write_section

REPO = Path(__file__).resolve().parent.parent
CONVNET = REPO / "tests" / "scripts" / "small_convnet.py"


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


def convnet(devices: int, timeout: float):
    outcome, seconds, stdout, stderr = acceltrain("run", "--simulate-devices", devices, CONVNET, timeout=timeout)
    lines = [line for line in stdout.splitlines() if line.startswith("test accuracy:")]
    accuracy = float(lines[-1].split(":")[1]) if outcome == "finished" and lines else None
    return outcome, seconds, accuracy, stderr


def summary(results) -> dict:
    outcomes = [r[0] for r in results]
    accuracies = [r[2] for r in results if r[2] is not None]
    return {"finished": outcomes.count("finished"), "runs": len(results),
            "failed": sorted(o for o in outcomes if o != "finished"),
            "accuracies": accuracies, "seconds": statistics.median(r[1] for r in results)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--epochs", type=int, help="epochs of the default job (default: the recipe's)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds after which a run counts as hung")
    args = parser.parse_args()

    jobs = {"default job (`acceltrain train`)": lambda devices, folder: default_job(devices, args.epochs, folder,
                                                                                     args.timeout),
            "small convnet (`acceltrain run tests/scripts/small_convnet.py`)": lambda devices, _: convnet(
                devices, args.timeout)}
    results = {name: [] for name in jobs}
    reference = {}
    loads = []  # the 1-minute load average as each 8-device run starts: how shared the machine was
    with tempfile.TemporaryDirectory() as scratch:
        for name, job in jobs.items():  # 1 device first: the accuracy to match
            reference[name] = job(1, Path(scratch) / f"one-{len(reference)}")
            print(f"{name}, 1 device: {reference[name][:3]}", flush=True)
        for run in range(args.runs):  # back to back, alternating
            for index, (name, job) in enumerate(jobs.items()):
                loads.append(os.getloadavg()[0])
                result = job(args.devices, Path(scratch) / f"run-{run}-{index}")
                results[name].append(result)
                print(f"{name}, run {run + 1}: {result[:3]}", flush=True)
                if result[0] != "finished":
                    print(result[3][-3000:], file=sys.stderr, flush=True)

    rows = []
    for name in jobs:
        s = summary(results[name])
        one = reference[name][2]
        accuracies = s["accuracies"]
        span = (f"{100 * statistics.mean(accuracies):.2f} ({100 * min(accuracies):.2f}–{100 * max(accuracies):.2f})"
                if accuracies else "–")
        gap = f"{100 * (statistics.mean(accuracies) - one):+.2f}" if accuracies and one is not None else "–"
        rows.append(f"| {name} | {s['finished']}/{s['runs']} | {', '.join(s['failed']) or 'none'} | {span} | "
                    f"{'–' if one is None else f'{100 * one:.2f}'} | {gap} | {s['seconds']:.0f} |")
    epochs = f"{args.epochs} epoch(s)" if args.epochs else "the recipe's epochs"
    body = f"""## Simulated devices under stress: runs that finished on {args.devices} simulated CPU devices

`python benchmarks/stress_simulated.py --runs {args.runs}{f' --epochs {args.epochs}' if args.epochs else ''}` on
{machine()}, {time.strftime('%Y-%m-%d')}. Each run a fresh process, back to back: the default job ({epochs},
seed 0) and a small convnet (2 epochs on 6,400 MNIST images), {args.devices} simulated devices, against one run of
each on 1 device. The 1-minute load average was {min(loads):.1f} to {max(loads):.1f} as the runs started ({os.cpu_count()}
logical CPUs), so the seconds are noisy; the counts are what matters.

| job | finished | failures (exit code; 134 is XLA's abort) | test accuracy % on {args.devices}, mean (min–max) | on 1 device | difference, points | median seconds a run |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}
"""
    write_section("stress-simulated", body)
    print(body)


if __name__ == "__main__":
    main()
