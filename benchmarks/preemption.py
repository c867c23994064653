"""Steps redone per preemption: with a notice (SIGTERM: one agreed step, one checkpoint, exit 42) against the 'auto'
checkpoint cadence alone (SIGKILL: no notice, the newest checkpoint is all there is).

    python benchmarks/preemption.py [--runs 5] [--quick]

The job (benchmarks/_preempted_job.py: a small MLP, 6 epochs of 38 steps) runs under `acceltrain run --checkpoint-dir
D --resume` (checkpoint_every 'auto'). Each run draws a step S (seeded, uniform over the run's steps past the first
epoch) and is preempted as step S begins (S steps done), in both ways, each its own pair of processes: the interrupted
run, then the same command rerun to the end. Steps redone = S minus the step the rerun resumed from ("resuming from
epoch-E-step-T": E × 38 + T), or 0 where it resumed past S (a notice lets the step in flight finish and saves after
it), measured from the runs' own output; the checkpoint's share is the ledger's checkpoint
and preemption time over the wall (--ledger: both processes with a notice; the rerun's alone without one, a
SIGKILLed process writes none). Records the section "preemption".
--quick: one run.
"""

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _results  # noqa: E402

SECTION = "preemption"
JOB = Path(__file__).resolve().parent / "_preempted_job.py"
STEPS_PER_EPOCH, EPOCHS = 38, 6
WAYS = {"notice": "SIGTERM", "auto": "SIGKILL"}


def _acceltrain(folder: Path, ledger: Path, **env) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "acceltrain", "run", "--checkpoint-dir", str(folder), "--resume",
               "--ledger", str(ledger), str(JOB)]
    return subprocess.run(command, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(_results.REPO / "src"), "KERAS_BACKEND": "jax", **env})


def one(way: str, at: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="acceltrain-preempt-") as tmp:
        folder, tmp = Path(tmp) / "ckpt", Path(tmp)
        first = _acceltrain(folder, tmp / "first.json", PREEMPT_AT=str(at), PREEMPT_SIGNAL=WAYS[way])
        if f"killed at {at}" not in first.stdout:
            sys.exit(f"{way} at {at}: the signal was not sent:\n{first.stderr[-3000:]}")
        expected = 42 if way == "notice" else -signal.SIGKILL
        if first.returncode != expected:
            sys.exit(f"{way} at {at}: exit {first.returncode}, expected {expected}:\n{first.stderr[-3000:]}")
        rerun = _acceltrain(folder, tmp / "rerun.json")
        if rerun.returncode != 0:
            sys.exit(f"{way} at {at}: the rerun failed:\n{rerun.stderr[-3000:]}")
        found = re.search(r"resuming from epoch-(\d+)-step-(\d+)", rerun.stderr)
        restored = int(found.group(1)) * STEPS_PER_EPOCH + int(found.group(2)) if found else 0
        ledgers = [json.loads(path.read_text()) for path in (tmp / "first.json", tmp / "rerun.json") if path.exists()]
    wall = sum(ledger["wall_seconds"] for ledger in ledgers)
    saving = sum(ledger["parts"].get("checkpoint", 0) + ledger["parts"].get("preemption", 0) for ledger in ledgers)
    return {"way": way, "at": at, "restored": restored, "redone": max(at - restored, 0), "wall": wall, "saving": saving,
            "ledgers": len(ledgers), "load": os.getloadavg()[0]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    draws = random.Random(0)
    runs = []
    for index in range(1 if args.quick else args.runs):
        at = draws.randrange(STEPS_PER_EPOCH + 2, STEPS_PER_EPOCH * EPOCHS - 2)
        for way in WAYS:  # interleaved
            runs.append(one(way, at))
            print(f"run {index + 1}: {runs[-1]}", file=sys.stderr, flush=True)
    run.save(SECTION, {"runs": runs, "steps_per_epoch": STEPS_PER_EPOCH, "epochs": EPOCHS})


def summarize(raw: dict) -> dict:
    ways = {}
    for way in WAYS:
        mine = [r for r in raw["runs"] if r["way"] == way]
        ways[way] = {"runs": len(mine), "redone": [r["redone"] for r in mine],
                     "mean_redone": sum(r["redone"] for r in mine) / len(mine),
                     "most_redone": max(r["redone"] for r in mine),
                     "saving_share": sum(r["saving"] for r in mine) / sum(r["wall"] for r in mine)}
    loads = [r["load"] for r in raw["runs"]]
    return {"ways": ways, "loads": [min(loads), max(loads)], "steps": raw["steps_per_epoch"] * raw["epochs"]}


def render(summary: dict, record: dict) -> str:
    notice, auto = summary["ways"]["notice"], summary["ways"]["auto"]
    table = ["| preempted | runs | steps redone, each run | mean | most | checkpoint + preemption share of the wall |",
             "|---|---|---|---|---|---|"]
    for way, words in (("notice", "with a notice (SIGTERM → exit 42)"), ("auto", "without one ('auto' cadence alone, "
                                                                                "SIGKILL)")):
        found = summary["ways"][way]
        table.append(f"| {words} | {found['runs']} | {', '.join(map(str, found['redone']))} | "
                     f"{found['mean_redone']:.1f} | {found['most_redone']} | {found['saving_share']:.1%} |")
    return (
        "## Steps redone per preemption: a notice against the 'auto' cadence alone\n\n"
        f"`{record['command']}`; JAX, one process. A small MLP, {summary['steps']} steps in all, checkpointed "
        "'auto', preempted as a drawn step begins, then the same command rerun to the end; steps redone are the "
        "drawn step minus the step the rerun resumed from (each run's own output), the share is the ledger's "
        "checkpoint and preemption time over the wall, of both processes with a notice, of the rerun alone without "
        "one (a SIGKILLed process writes no ledger). Counts, not timings: no noise applies "
        f"to them. Runs started at {_results.load_range(summary['loads'], record['machine'].get('cores'))}.\n\n"
        + "\n".join(table)
        + f"\n\nWith a notice, at most {notice['most_redone']} step(s) redone per preemption (goal: at most 1); "
        f"the 'auto' cadence alone redid {auto['mean_redone']:.1f} on average, {auto['most_redone']} at most."
    )


def quotes(summary: dict, record: dict) -> dict:
    notice, auto = summary["ways"]["notice"], summary["ways"]["auto"]
    return {"summary": f"Steps redone per preemption ({_results.cite(record)}): at most {notice['most_redone']} with a "
                       f"notice; {auto['mean_redone']:.1f} on average ({auto['most_redone']} at most) with the 'auto' "
                       "cadence alone."}


if __name__ == "__main__":
    main()
