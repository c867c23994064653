"""What `acceltrain plan` says of Gemma 2B on tpu-v5e-8, and what saying it costs on this machine.

Two jobs, each a fresh process running `acceltrain.plan("tpu-v5e-8", ..., sequence_length=512, batch_size=8)`
on keras_hub's gemma_2b_en config (tests/presets/gemma_2b: no weights, built from shapes alone), compiled by
libtpu's compile-only client on this CPU:
  - LoRA of rank 4 (`--model tests/presets/gemma_2b --lora-rank 4`, the task's default Adam on the adapters);
  - every weight fine-tuned with AdamW in float32 (tests/scripts/gemma_lm.py:gemma_2b_full_adamw).
For each: the bytes per chip of every candidate and lever the plan compiled, the seconds of each compile,
the recommendation, the wall and CPU time and the peak resident memory of the process, and the load
average before and after (the machine may be shared: say so beside any figure).

    python benchmarks/plan_lm.py                 # prints the results as JSON, writes benchmarks/results/plan_lm.json
    python benchmarks/plan_lm.py --jobs lora     # one of them

`results()` returns the plain dict; `section(results)` renders it as a BENCHMARKS.md section (not written here).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results" / "plan_lm.json"
JOB = dict(target="tpu-v5e-8", sequence_length=512, batch_size=8)
JOBS = {
    "lora": {"model": str(REPO / "tests" / "presets" / "gemma_2b"), "lora_rank": 4},
    "full_adamw": {"model": f"{REPO / 'tests' / 'scripts' / 'gemma_lm.py'}:gemma_2b_full_adamw"},
}

# Run in the child: the plan, with each compile of the training step timed.
CHILD = """
import json, resource, sys, time
from acceltrain.planning import plan, step
seconds = []
compile_step = step.compile_step
def timed(*args, **kwargs):
    start = time.perf_counter()
    try:
        return compile_step(*args, **kwargs)
    finally:
        seconds.append(round(time.perf_counter() - start, 1))
step.compile_step = timed
arguments = json.loads(sys.argv[1])
result = plan(arguments.pop("target"), **arguments)
print(json.dumps({"plan": result.as_dict(), "compile_seconds": seconds, "table": result.table(),
                  "peak_resident_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def measure(name: str) -> dict:
    """One job in a fresh process: its plan, compile seconds, wall and CPU seconds, peak resident bytes (the
    process's own maximum resident set, read by itself at its end)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_before = usage.ru_utime + usage.ru_stime
    load_before = os.getloadavg()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps({**JOB, **JOBS[name]})], capture_output=True,
                          text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"plan {name} failed:\n{done.stderr[-4000:]}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = json.loads(done.stdout)
    plan = child["plan"]
    compiled = [{"distribution": c["distribution"], "bytes_per_device": c["bytes_per_device"], "fits": c["fits"]}
                for c in plan["candidates"]]
    return {
        "job": {**JOB, **JOBS[name]},
        "recommended": plan["recommended"],
        "recommended_setting": plan["recommended_setting"],
        "device_memory_bytes": plan["device_memory_bytes"],
        "candidates": compiled,
        "levers": [{"name": lever["name"], "bytes_per_device": lever["bytes_per_device"], "fits": lever["fits"]}
                   for lever in plan["levers"]],
        "compile_seconds": child["compile_seconds"],
        "wall_seconds": round(seconds, 1),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime - cpu_before, 1),
        "peak_resident_bytes": child["peak_resident_bytes"],
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "table": child["table"],
    }


def results(jobs=tuple(JOBS)) -> dict:
    return {"benchmark": "plan_lm", "machine": machine(), "jobs": {name: measure(name) for name in jobs}}


def section(found: dict) -> str:
    """The BENCHMARKS.md section for these results (the caller writes it)."""
    from acceltrain.sharding import format_bytes

    rows = []
    for name, job in found["jobs"].items():
        setting = job["recommended_setting"]
        chosen = " + ".join([setting["distribution"]] + (["bfloat16"] if setting["compute"] != "float32" else [])
                            + (["remat"] if setting["remat"] else [])
                            + ([f"accumulate {setting['accumulation']}"] if setting["accumulation"] > 1 else [])
                            ) if setting else "none fits"
        per_candidate = ", ".join(f"{c['distribution']} {format_bytes(c['bytes_per_device'])}"
                                  f"{'' if c['fits'] else ' (no)'}" for c in job["candidates"])
        compiles = ", ".join(f"{seconds:.0f}" for seconds in job["compile_seconds"])
        rows.append(f"| {name} | {per_candidate} | {chosen} | {compiles} s "
                    f"| {job['wall_seconds']:.0f} s | {format_bytes(job['peak_resident_bytes'])} "
                    f"| {job['load_average_before'][0]:.1f} |")
    return "\n".join([
        "## `acceltrain plan` on Gemma 2B (keras_hub's gemma_2b_en config), tpu-v5e-8, 512 tokens, batch 8",
        "",
        f"`python benchmarks/plan_lm.py` on {found['machine']}; each job a fresh process compiling every candidate "
        "with libtpu's compile-only client (16 GiB a chip). Peak memory is the process's maximum resident set.",
        "",
        "| job | bytes per chip (compiled) | recommended | each compile | wall time | peak memory | load before |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", nargs="+", choices=list(JOBS), default=list(JOBS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    found = results(tuple(args.jobs))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_suffix(".json.partial")
    partial.write_text(json.dumps(found, indent=2) + "\n")
    partial.replace(args.out)
    print(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()
