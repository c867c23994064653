"""What `acceltrain plan` costs here: the peak memory and the wall time of the command, for the MNIST recipe
and a ~1.4-billion-parameter MLP with Adam, on tpu-v5e-8 (libtpu's compile-only client, this CPU).

The model is built from shapes alone, so the 1.4B MLP's 22 GB of training state (weights, gradients, Adam's
two slots, in float32) is never allocated: the peak memory is the compiler's, not the model's. Each run is
a fresh process, measured from outside (wall clock; peak resident set from the OS's rusage of the child).
The record keeps each plan's JSON too: README quotes the big job's candidates from it.

    python benchmarks/plan_cost.py [--quick]     # records the section "plan-cost"; --quick: the MNIST job only
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _results  # noqa: E402

SECTION = "plan-cost"
TARGET = "tpu-v5e-8"
BIG_MLP = "tests/scripts/big_mlp.py:build"
JOBS = {  # smallest first: a child's peak is only seen when it exceeds every earlier child's
    "MNIST recipe (575K params), batch 1200": ["--compare"],
    "~1.4B-param MLP + Adam, batch 1024": ["--model", BIG_MLP, "--batch-size", "1024", "--compare"],
}
BIG = list(JOBS)[1]


def measure(args: list[str]) -> dict:
    """Wall and CPU seconds, the child's peak resident bytes, the plan as JSON and the notes it printed."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    before, cpu_before = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "acceltrain", "plan", "--target", TARGET, *args, "--json"],
                          capture_output=True, text=True, cwd=_results.REPO, check=True)
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if usage.ru_maxrss <= before:
        raise RuntimeError("this run's peak is hidden by an earlier, larger child: run the jobs smallest first")
    notes = [line.split("note: ", 1)[1] for line in done.stderr.splitlines() if "note: " in line]
    return {"args": args, "wall_seconds": round(seconds, 1),
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime - cpu_before, 1),
            "peak_bytes": usage.ru_maxrss * 1024, "plan": json.loads(done.stdout), "notes": notes}


def main() -> None:
    parser = argparse.ArgumentParser()
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    run.save(SECTION, {"target": TARGET, "jobs": measure_jobs(JOBS, measure, args.quick)})


def measure_jobs(jobs: dict, measure, quick: bool) -> dict:
    """Each job's `measure(args)`, in order (--quick: the first only), each printed as it ends."""
    found = {}
    for name, job_args in list(jobs.items())[:1 if quick else None]:
        found[name] = measure(job_args)
        print(name, {key: value for key, value in found[name].items() if key != "plan"}, file=sys.stderr, flush=True)
    return found


# --- Rendering ----------------------------------------------------------------------------------

def summarize(raw: dict) -> dict:
    jobs = {}
    for name, job in raw["jobs"].items():
        plan = job["plan"]
        args = job["args"]
        jobs[name] = {"command": " ".join(["acceltrain plan --target", raw["target"], *args]),
                      "batch_size": int(args[args.index("--batch-size") + 1]) if "--batch-size" in args else None,
                      "wall_seconds": job["wall_seconds"], "cpu_seconds": job["cpu_seconds"],
                      "peak_bytes": job["peak_bytes"], "recommended": plan["recommended"],
                      "device_memory_bytes": plan["device_memory_bytes"], "devices": plan["devices"],
                      "compiled_for": plan["compiled_for"], "candidates": plan["candidates"], "notes": job["notes"]}
    return {"target": raw["target"], "jobs": jobs}


def _duration(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def recommended_bytes(job: dict) -> int | None:
    chosen = [c for c in job["candidates"] or [] if c["distribution"] == job["recommended"]]
    return chosen[0]["bytes_per_device"] if chosen else job.get("recommended_bytes")


def render(summary: dict, record: dict) -> str:
    rows = []
    for name, job in summary["jobs"].items():
        chosen = recommended_bytes(job)
        rows.append(f"| {name} | {job['wall_seconds']:.0f} s | {job['cpu_seconds']:.0f} s | "
                    f"{_results.size(job['peak_bytes'])} | {job['recommended']} "
                    f"({_results.not_recorded(chosen and _results.size(chosen))} of "
                    f"{_results.size(job['device_memory_bytes'])} per chip) |")
    return "\n".join([
        f"## What `acceltrain plan` costs: wall time and peak memory of the command, {summary['target']}",
        "",
        f"`{record['command']}`; each job a fresh `acceltrain plan ... --compare --json` process compiling every candidate "
        "(data, fsdp, model) with libtpu's compile-only client. Peak memory is the child's maximum resident set. "
        "Wall time includes starting Python, Keras and libtpu, and grows with what else the machine runs; CPU "
        "time (user + system, all threads) varies less.",
        "",
        "| job | wall time | CPU time | peak memory | recommended |",
        "|---|---|---|---|---|",
        *rows,
    ])


def plan_table(job: dict) -> str:
    """A plan's candidates as a Markdown table, with its recommendation and notes."""
    lines = ["| distribution | mesh | per device | fits | TFLOP/step | step at peak | samples/s |",
             "|---|---|---|---|---|---|---|"]
    batch_size = job["batch_size"]
    for c in job["candidates"]:
        flops = "refused" if c["flops_per_step"] is None else f"{c['flops_per_step'] / 1e12:.4g}"
        step = c["step_seconds_at_peak"]
        lines.append(f"| {c['distribution']} | {c['mesh']} | {_results.size(c['bytes_per_device'])} | "
                     f"{'yes' if c['fits'] else 'NO'} | {flops} | {_duration(step) if step else 'n/a'} | "
                     f"{f'{batch_size / step:,.0f}' if step else 'n/a'} |")
    lines += ["", f"Recommended: {job['recommended']} ({_results.size(recommended_bytes(job))} of "
                  f"{_results.size(job['device_memory_bytes'])} per device)."]
    lines += [f"Note: {note}" for note in job["notes"]]
    return "\n".join(lines)


# Quotes whose figures a busy machine does not change (the compiler's bytes and FLOPs, and times at the published peak):
# quoted from a loaded record too (render.py).
LOAD_FREE = ("big-plan",)


def quotes(summary: dict, record: dict) -> dict:
    """`big-cost`: what planning the big MLP took; `big-plan`: its candidates, as `plan --json` gave them."""
    said = {}
    job = summary["jobs"].get(BIG)
    if job:
        machine = record["machine"]
        said["big-cost"] = (f"took {_results.size(job['peak_bytes'])} of memory at its peak and "
                            f"{job['cpu_seconds']:.0f} s of CPU time ({job['wall_seconds']:.0f} s of wall time) on "
                            f"{machine['cores']} cores of {machine['cpu']} ({_results.cite(record)})")
    if job and job["candidates"]:
        libtpu = (record.get("versions") or {}).get("libtpu", "version not recorded")
        said["big-plan"] = (f"`{job['command']}` on {record['machine']['cores']} cores of {record['machine']['cpu']}, "
                            f"libtpu {libtpu}, compiled for {job['compiled_for']}, {job['devices']} devices "
                            f"({_results.cite(record)}):\n\n" + plan_table(job) + "\n")
    return said


if __name__ == "__main__":
    main()
