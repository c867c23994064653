"""What `acceltrain plan` says of Gemma 2B on tpu-v5e-8, and what saying it costs on this machine.

Two jobs, each a fresh `acceltrain plan --target tpu-v5e-8 --sequence-length 512 --batch-size 8 --json` process
on keras_hub's gemma_2b_en config (tests/presets/gemma_2b: no weights, built from shapes alone), compiled by
libtpu's compile-only client on this CPU:
  - LoRA of rank 4 (`--model tests/presets/gemma_2b --lora-rank 4`, the task's default Adam on the adapters);
  - every weight fine-tuned with AdamW, the weights and optimizer in float32 (tests/scripts/gemma_lm.py:gemma_2b_full_adamw);
  each planned in the precision `acceltrain run` would use on the target (bfloat16 compute on a TPU).
For each: the bytes per chip of every candidate and lever the plan compiled, the recommendation, and the wall
time, CPU time and peak resident memory of the process (measured from outside, as plan_cost.py does).

    python benchmarks/plan_lm.py [--quick]     # records the section "plan-lm"; --quick: the LoRA job only
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

from benchmarks import _results, plan_cost  # noqa: E402

SECTION = "plan-lm"
TARGET = "tpu-v5e-8"
SEQUENCE_LENGTH, BATCH_SIZE = 512, 8
JOBS = {  # smallest first: a child's peak is only seen when it exceeds every earlier child's
    "LoRA rank 4": ["--model", "tests/presets/gemma_2b", "--lora-rank", "4"],
    "every weight, AdamW, float32 weights": ["--model", "tests/scripts/gemma_lm.py:gemma_2b_full_adamw"],
}


def measure(args: list[str]) -> dict:
    """Wall and CPU seconds, the child's peak resident bytes, and the plan as JSON."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    before, cpu_before = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "acceltrain", "plan", "--target", TARGET, *args,
                           "--sequence-length", str(SEQUENCE_LENGTH), "--batch-size", str(BATCH_SIZE), "--json"],
                          capture_output=True, text=True, cwd=_results.REPO)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"acceltrain plan {' '.join(args)} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"args": args, "wall_seconds": round(seconds, 1),
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime - cpu_before, 1),
            "peak_bytes": usage.ru_maxrss * 1024 if usage.ru_maxrss > before else None,
            "plan": json.loads(done.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser()
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    jobs = plan_cost.measure_jobs(JOBS, measure, args.quick)
    run.save(SECTION, {"target": TARGET, "sequence_length": SEQUENCE_LENGTH, "batch_size": BATCH_SIZE, "jobs": jobs})


# --- Rendering ----------------------------------------------------------------------------------

def summarize(raw: dict) -> dict:
    jobs = {}
    for name, job in raw["jobs"].items():
        plan = job["plan"]
        jobs[name] = {"wall_seconds": job["wall_seconds"], "cpu_seconds": job["cpu_seconds"],
                      "peak_bytes": job["peak_bytes"], "recommended": plan["recommended"],
                      "setting": plan["recommended_setting"], "device_memory_bytes": plan["device_memory_bytes"],
                      "compiled": compiled(plan)}
    return {key: raw[key] for key in ("target", "sequence_length", "batch_size")} | {"jobs": jobs}


def compiled(plan: dict) -> list:
    """(what, bytes per chip, fits) for each candidate, then each lever the walk compiled beyond them (the walk
    starts from the candidates, so it repeats them: each is listed once)."""
    found = [(c["distribution"], c["bytes_per_device"], c["fits"]) for c in plan["candidates"]]
    seen = {name for name, _, _ in found}
    return found + [(lever["name"], lever["bytes_per_device"], lever["fits"]) for lever in plan["levers"]
                    if lever["name"] not in seen]


def chosen(setting: dict | None) -> str:
    """'fsdp + bfloat16 + remat', or 'none fits'."""
    if not setting:
        return "none fits"
    parts = [setting["distribution"]]
    parts += ["bfloat16"] if setting.get("compute", "float32") != "float32" else []
    parts += ["remat"] if setting.get("remat") else []
    parts += [f"accumulate {setting['accumulation']}"] if setting.get("accumulation", 1) > 1 else []
    return " + ".join(parts)


def compiled_phrase(compiled: list) -> str:
    return ", ".join(f"{name} {_results.not_recorded(nbytes and _results.size(nbytes))}{'' if fits else ' (does not fit)'}"
                     for name, nbytes, fits in compiled)


def render(summary: dict, record: dict) -> str:
    rows = [f"| {name} | {compiled_phrase(job['compiled'])} | {chosen(job['setting'])} | {job['wall_seconds']:.0f} s | "
            f"{job['cpu_seconds']:.0f} s | {_results.not_recorded(job['peak_bytes'] and _results.size(job['peak_bytes']))} |"
            for name, job in summary["jobs"].items()]
    memory = next(iter(summary["jobs"].values()), {}).get("device_memory_bytes")
    return "\n".join([
        f"## `acceltrain plan` on Gemma 2B (keras_hub's gemma_2b_en config), {summary['target']}, "
        f"{summary['sequence_length']} tokens, batch {summary['batch_size']}",
        "",
        f"`{record['command']}`: each job a fresh `acceltrain plan ... --json` process compiling the training step "
        "with libtpu's compile-only client on this CPU, the distributions in order up to the first that fits, then "
        f"the levers; {_results.not_recorded(memory and _results.size(memory))} a chip. Bytes per chip are the "
        "compiler's; peak memory is the child's maximum resident set.",
        "",
        "| job | bytes per chip, as compiled | recommended | wall time | CPU time | peak memory |",
        "|---|---|---|---|---|---|",
        *rows,
    ])


def quotes(summary: dict, record: dict) -> dict:
    """`jobs`: what the plan recommended for each job, at what bytes a chip, and what planning it took."""
    machine = record["machine"]
    each = [f"{name}: {chosen(job['setting'])} ({compiled_phrase(job['compiled'])}), "
            f"{job['cpu_seconds']:.0f} s of CPU time to plan" for name, job in summary["jobs"].items()]
    return {"jobs": (f"On {summary['target']}, {summary['sequence_length']} tokens, batch {summary['batch_size']}, "
                     f"{machine['cores']} cores of {machine['cpu']} ({_results.cite(record)}): " + "; ".join(each) + ".")}


if __name__ == "__main__":
    main()
