"""A keras_hub causal LM fine-tuned with LoRA under `acceltrain run`, and `acceltrain plan --target here` for the
same job: throughput, the ledger's MFU, the peak memory measured beside the memory the plan compiled. For a GPU
(benchmarks/gpu_check.sh runs it on the H200 the device tool lends).

    python benchmarks/lm_finetune.py [--quick]    # records the section "lm-finetune-gpu"

Two fresh processes, on benchmarks/lm_finetune_script.py (Gemma 2B's shapes with 6 layers, LoRA of rank 4, AdamW,
batch 8 of 512 tokens, 300 steps over 3 epochs):
  - `acceltrain run --verify 3 --ledger FILE lm_finetune_script.py --out FILE`: the script's own timings (the
    median step after the first two, tokens a second), the device's peak bytes in use (JAX's memory_stats), the
    ledger (where the time went, the FLOPs of a step, MFU against the published peak) and what --verify said;
  - `acceltrain plan --target here --model lm_finetune_script.py:model --batch-size 8 --sequence-length 512
    --json`: the bytes a device the plan compiled for the same step, and its recommendation.
--quick: a 1-layer model with a 512-token vocabulary, 12 steps of 32 tokens (a CPU rehearsal, 8 GiB assumed for the
plan; not a result).
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _results  # noqa: E402

SECTION = "lm-finetune-gpu"
SCRIPT = Path(__file__).resolve().parent / "lm_finetune_script.py"
FULL = {"script": ["--steps", "300"], "plan": ["--sequence-length", "512"]}
QUICK = {"script": ["--layers", "1", "--vocabulary", "512", "--steps", "12", "--sequence-length", "32"],
         "plan": ["--sequence-length", "32", "--device-memory", "8GiB"]}
RUN_SECONDS, PLAN_SECONDS = 200, 120


def acceltrain(args: list, seconds: float) -> subprocess.CompletedProcess:
    """`python -m acceltrain ARGS`, its output kept (it is printed too, for the log)."""
    done = subprocess.run([sys.executable, "-m", "acceltrain", *args], capture_output=True, text=True,
                          timeout=seconds, cwd=_results.REPO)
    print(done.stdout[-6000:], done.stderr[-6000:], sep="\n", flush=True)
    if done.returncode != 0:
        raise RuntimeError(f"acceltrain {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def said(output: str, prefix: str) -> str | None:
    """acceltrain's line starting `acceltrain: PREFIX`, as printed (None: it said none)."""
    lines = [line for line in output.splitlines() if line.startswith(f"acceltrain: {prefix}")]
    return lines[-1].removeprefix("acceltrain: ") if lines else None


def measure(sizes: dict) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        ledger, out = Path(folder) / "ledger.json", Path(folder) / "lm.json"
        done = acceltrain(["run", "--verify", "3", "--ledger", str(ledger), str(SCRIPT), *sizes["script"],
                           "--out", str(out)], RUN_SECONDS)
        run = {"script": json.loads(out.read_text()), "ledger": json.loads(ledger.read_text()),
               "connected": said(done.stderr, "jax on"), "verify": said(done.stderr, "verify"),
               "where_time_went": said(done.stderr, "where the")}
    planned = acceltrain(["plan", "--target", "here", "--model", f"{SCRIPT}:model", "--batch-size", "8",
                          *sizes["plan"], "--json"], PLAN_SECONDS)
    return {"run": run, "plan": json.loads(planned.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser()
    _results.add_arguments(parser)
    args = parser.parse_args()
    record = _results.Run(__file__, args)
    record.save(SECTION, measure(QUICK if args.quick else FULL))


# --- Rendering ----------------------------------------------------------------------------------

def summarize(raw: dict) -> dict:
    script, ledger, plan = raw["run"]["script"], raw["run"]["ledger"], raw["plan"]
    recommended = next((c for c in plan["candidates"] if c["distribution"] == plan["recommended"]), None)
    planned = recommended and recommended["bytes_per_device"]
    step = script["steady_step_seconds"]
    flops = ledger.get("flops_per_step")
    return {
        "model": {key: script[key] for key in ("layers", "vocabulary", "lora_rank", "parameters",
                                               "trainable_parameters", "dtype_policy")},
        "job": {key: script[key] for key in ("steps", "epochs", "batch_size", "sequence_length")},
        "connected": raw["run"]["connected"], "verify": raw["run"]["verify"],
        "where_time_went": raw["run"]["where_time_went"],
        "step_seconds": step, "first_step_seconds": script["first_step_seconds"],
        "tokens_per_second": script["tokens_per_second"],
        "steady_flops_per_second": flops / step if flops and step else None,
        "ledger_mfu": ledger.get("mfu"), "ledger_parts": ledger["parts"], "ledger_seconds": ledger["wall_seconds"],
        "loss": script["loss"],
        "peak_bytes": script["peak_bytes_in_use"], "planned_bytes": planned,
        "planned_over_peak": planned / script["peak_bytes_in_use"] if planned and script["peak_bytes_in_use"] else None,
        "plan_recommended": plan["recommended"], "device_memory_bytes": plan["device_memory_bytes"],
    }


def render(summary: dict, record: dict) -> str:
    m, job = summary["model"], summary["job"]
    size = lambda nbytes: _results.not_recorded(nbytes and _results.size(nbytes))  # noqa: E731
    parts = summary["ledger_parts"]
    ledger = ", ".join(f"{name.replace('_', ' ')} {seconds / summary['ledger_seconds']:.0%}"
                       for name, seconds in sorted(parts.items(), key=lambda item: -item[1]) if seconds > 0)
    rate = summary["steady_flops_per_second"]
    rows = [
        ("steady step (median after the first two)", f"{1e3 * summary['step_seconds']:.1f} ms"),
        ("tokens a second", f"{summary['tokens_per_second']:,.0f}"),
        ("first step (compiles)", f"{summary['first_step_seconds']:.1f} s"),
        ("the step's FLOPs (its matmuls, as traced) over the steady step", _results.not_recorded(rate and f"{rate / 1e12:.3g} TFLOP/s")),
        ("MFU of the device steps, the ledger's (published bf16 peak)",
         _results.not_recorded(None if summary["ledger_mfu"] is None else f"{summary['ledger_mfu']:.1%}")),
        ("peak device memory, measured (JAX's peak_bytes_in_use)", size(summary["peak_bytes"])),
        (f"device memory, `plan --target here` ({summary['plan_recommended']})", size(summary["planned_bytes"])),
        ("planned / measured", _results.not_recorded(summary["planned_over_peak"] and f"{summary['planned_over_peak']:.2f}×")),
    ]
    return "\n".join([
        "## A keras_hub causal LM, LoRA, under `acceltrain run` on a GPU, beside `acceltrain plan --target here`",
        "",
        f"`{record['command']}` ({_results.not_recorded(summary['connected'])}). benchmarks/lm_finetune_script.py: "
        f"Gemma 2B's shapes with {m['layers']} layers and a {m['vocabulary']:,}-token vocabulary, "
        f"{m['parameters'] / 1e6:,.0f}M parameters, LoRA of rank {m['lora_rank']} "
        f"({m['trainable_parameters'] / 1e6:.2f}M trainable), dtype policy {m['dtype_policy']}, AdamW; "
        f"{job['steps']} steps of batch {job['batch_size']} × {job['sequence_length']} tokens over {job['epochs']} "
        "epochs, synthetic tokens, random weights (a measure of speed and memory, not of learning). Each figure is "
        "this one run's; a single run, so no spread is known.",
        "",
        "| | |",
        "|---|---|",
        *[f"| {name} | {value} |" for name, value in rows],
        "",
        f"Where the run's {summary['ledger_seconds']:.0f} s went (the ledger): {ledger}. "
        f"`--verify 3` said: {_results.not_recorded(summary['verify'])}.",
    ])


if __name__ == "__main__":
    main()
