"""What `acceltrain plan` costs here: the peak memory and the wall time of the command, for the MNIST recipe
and a ~1.4-billion-parameter MLP with Adam, on tpu-v5e-8 (libtpu's compile-only client, this CPU).

The model is built from shapes alone, so the 1.4B MLP's 22 GB of training state (weights, gradients, Adam's
two slots, in float32) is never allocated: the peak memory is the compiler's, not the model's. Each run is
a fresh process, measured from outside (wall clock; peak resident set from the OS's rusage of the child).

    python benchmarks/plan_cost.py            # writes the "plan-cost" section of BENCHMARKS.md
"""

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, write_section  # noqa: E402

from acceltrain.sharding import format_bytes  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BIG_MLP = f"{REPO / 'tests' / 'scripts' / 'big_mlp.py'}:build"
JOBS = {
    "MNIST recipe (575K params), batch 1200": ["--target", "tpu-v5e-8", "--compare"],
    "~1.4B-param MLP + Adam, batch 1024": ["--target", "tpu-v5e-8", "--model", BIG_MLP, "--batch-size", "1024",
                                          "--compare"],
}


def measure(args: list[str]) -> tuple[float, float, int, dict]:
    """(wall seconds, CPU seconds, peak resident bytes of the child, the plan as JSON)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    before, cpu_before = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "acceltrain", "plan", *args, "--json"], capture_output=True,
                          text=True, cwd=REPO, check=True)
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if usage.ru_maxrss <= before:
        raise RuntimeError("this run's peak is hidden by an earlier, larger child: run the jobs smallest first")
    return seconds, usage.ru_utime + usage.ru_stime - cpu_before, usage.ru_maxrss * 1024, json.loads(done.stdout)


def main() -> None:
    rows = []
    for name, args in JOBS.items():
        seconds, cpu_seconds, peak, plan = measure(args)
        by_name = {c["distribution"]: c for c in plan["candidates"]}
        chosen = by_name.get(plan["recommended"], {})
        rows.append(f"| {name} | {seconds:.0f} s | {cpu_seconds:.0f} s | {format_bytes(peak)} | {plan['recommended']} "
                    f"({format_bytes(chosen.get('bytes_per_device', 0))} of "
                    f"{format_bytes(plan['device_memory_bytes'])} per chip) |")
        print(rows[-1], flush=True)
    body = "\n".join([
        "## What `acceltrain plan` costs: wall time and peak memory of the command, tpu-v5e-8",
        "",
        f"`python benchmarks/plan_cost.py` on {machine()}; each job a fresh `acceltrain plan ... --compare --json` "
        "process compiling every candidate (data, fsdp, model) with libtpu's compile-only client. Peak memory is the "
        "child's maximum resident set. Wall time includes starting Python, Keras and libtpu, and grows with "
        "what else the machine runs; CPU time (user + system, all threads) varies less.",
        "",
        "| job | wall time | CPU time | peak memory | recommended |",
        "|---|---|---|---|---|",
        *rows,
    ])
    write_section("plan-cost", body)


if __name__ == "__main__":
    main()
