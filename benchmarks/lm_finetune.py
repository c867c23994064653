"""A keras_hub causal LM fine-tuned with LoRA under `acceltrain run`, and `acceltrain plan --target here` for the
same job: throughput, the ledger's MFU, the peak memory measured beside the memory the plan compiled. For a GPU
(benchmarks/gpu_check.sh runs it on the H200 the device tool lends).

    python benchmarks/lm_finetune.py [--quick]    # records the section "lm-finetune-gpu"

Fresh processes, one after another, on benchmarks/lm_finetune_script.py (Gemma 2B's shapes with 6 layers, LoRA of
rank 4, AdamW, batch 8 of 512 tokens, 300 steps over 3 epochs):
  - `acceltrain run --verify 3 --ledger FILE lm_finetune_script.py --out FILE`: the script's own timings (the
    median step after the first two, tokens a second), the device's peak bytes in use (JAX's memory_stats), the
    ledger (where the time went, the FLOPs of a step, MFU against the published peak) and what --verify said;
  - `acceltrain plan --target here --model lm_finetune_script.py:model --batch-size 8 --sequence-length 512
    --json`: the bytes a device the plan compiled for the same step, and its recommendation;
  - plain Keras on JAX, no acceltrain: `python lm_finetune_script.py` as written (Keras's float32 default), and
    with `--policy mixed_bfloat16` (what acceltrain's precision 'auto' chooses on a GPU of compute capability 8+,
    set by hand): what acceltrain's step costs beside plain Keras's in the same precision, and what its choice of
    precision gave.
--quick: a 1-layer model with a 512-token vocabulary, 12 steps of 32 tokens (a CPU rehearsal, 8 GiB assumed for the
plan; not a result).
"""

import argparse
import json
import os
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
PLAIN = {"float32": [], "mixed_bfloat16": ["--policy", "mixed_bfloat16"]}  # plain Keras's runs: the default, then by hand


def python(args: list, seconds: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python ARGS` in a fresh process, its output kept (its end is printed too, for the log)."""
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=seconds,
                          cwd=_results.REPO, env=env)
    print(done.stdout[-6000:], done.stderr[-6000:], sep="\n", flush=True)
    if done.returncode != 0:
        raise RuntimeError(f"python {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def acceltrain(args: list, seconds: float) -> subprocess.CompletedProcess:
    return python(["-m", "acceltrain", *args], seconds)


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
    plain = {name: keras_alone(sizes["script"] + policy) for name, policy in PLAIN.items()}
    return {"run": run, "plan": json.loads(planned.stdout), "plain": plain}


def keras_alone(args: list) -> dict:
    """The script's own measurements under plain Keras on JAX, in a fresh process (no acceltrain)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "lm.json"
        python([str(SCRIPT), *args, "--out", str(out)], RUN_SECONDS, env={**os.environ, "KERAS_BACKEND": "jax"})
        return json.loads(out.read_text())


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
    runs = {"acceltrain run": script, **{f"plain Keras, {name}": run for name, run in raw.get("plain", {}).items()}}
    return {
        "model": {key: script[key] for key in ("layers", "vocabulary", "lora_rank", "parameters",
                                               "trainable_parameters", "dtype_policy")},
        "job": {key: script[key] for key in ("steps", "epochs", "batch_size", "sequence_length")},
        "connected": raw["run"]["connected"], "verify": raw["run"]["verify"],
        "runs": {name: {key: run[key] for key in ("dtype_policy", "steady_step_seconds", "tokens_per_second",
                                                  "first_step_seconds", "peak_bytes_in_use")}
                 for name, run in runs.items()},
        "flops_per_step": flops, "steady_flops_per_second": flops / step if flops and step else None,
        "ledger_mfu": ledger.get("mfu"), "ledger_parts": ledger["parts"], "ledger_seconds": ledger["wall_seconds"],
        "peak_bytes": script["peak_bytes_in_use"], "planned_bytes": planned,
        "planned_over_peak": planned / script["peak_bytes_in_use"] if planned and script["peak_bytes_in_use"] else None,
        "plan_recommended": plan["recommended"], "plan_compute": (plan.get("recommended_setting") or {}).get("compute"),
        "device_kind": plan.get("compiled_for"), "published_peak": _published_bf16_peak(plan.get("compiled_for")),
        "device_memory_bytes": plan["device_memory_bytes"],
    }


def _published_bf16_peak(device_kind: str | None) -> float | None:
    """A GPU's published dense bf16 peak (acceltrain/hardware/gpu.py's table, cited there), or None."""
    from acceltrain.hardware import gpu

    return gpu.peak_flops_per_second(device_kind, "bfloat16") if device_kind else None


def render(summary: dict, record: dict) -> str:
    m, job, runs = summary["model"], summary["job"], summary["runs"]
    size = lambda nbytes: _results.not_recorded(nbytes and _results.size(nbytes))  # noqa: E731
    parts = summary["ledger_parts"]
    ledger = ", ".join(f"{name.replace('_', ' ')} {seconds / summary['ledger_seconds']:.0%}"
                       for name, seconds in sorted(parts.items(), key=lambda item: -item[1]) if seconds > 0)
    flops = f"{summary['flops_per_step'] / 1e12:.2f} TFLOP" if summary["flops_per_step"] else "not recorded"
    rate = summary["steady_flops_per_second"]
    peak = summary.get("published_peak")
    share = f" ({rate / peak:.1%} of the {summary['device_kind']}'s published bf16 peak, {peak / 1e12:.0f} TFLOP/s)" \
        if rate and peak else ""
    rate = f"{rate / 1e12:.0f} TFLOP/s{share}" if rate else "not recorded"
    mfu = "not recorded (its ledger noted no peak for a script's fit)" if summary["ledger_mfu"] is None else \
        f"{summary['ledger_mfu']:.1%}"
    compute = f" in {summary['plan_compute']}" if summary["plan_compute"] else ""
    ratio = summary["planned_over_peak"]
    planned_over_peak = f"{ratio:.2f}×" if ratio else "not recorded"
    rows = [f"| {name} | {run['dtype_policy']} | {1e3 * run['steady_step_seconds']:.1f} ms | "
            f"{run['tokens_per_second']:,.0f} | {run['first_step_seconds']:.1f} s | {size(run['peak_bytes_in_use'])} |"
            for name, run in runs.items()]
    return "\n".join([
        "## A keras_hub causal LM, LoRA, under `acceltrain run` on a GPU, beside plain Keras and `acceltrain plan "
        "--target here`",
        "",
        f"`{record['command']}` ({_results.not_recorded(summary['connected'])}). benchmarks/lm_finetune_script.py: "
        f"Gemma 2B's shapes with {m['layers']} layers and a {m['vocabulary']:,}-token vocabulary, "
        f"{m['parameters'] / 1e6:,.0f}M parameters, LoRA of rank {m['lora_rank']} "
        f"({m['trainable_parameters'] / 1e6:.2f}M trainable), AdamW; {job['steps']} steps of batch "
        f"{job['batch_size']} × {job['sequence_length']} tokens over {job['epochs']} epochs, synthetic tokens, random "
        "weights (a measure of speed and memory, not of learning). Each row is one fresh process, run once, one "
        "after another: no spread is known, so no difference below is judged against noise. Steady step: the "
        "median after the first two (the first compiles); peak memory: JAX's peak_bytes_in_use on the device.",
        "",
        "| run | dtype policy | steady step | tokens a second | first step (compiles) | peak device memory |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"- The step's FLOPs, its matmuls as traced: {flops} a step, {rate} over acceltrain's steady step; the "
        f"ledger's MFU of its device steps (the published bf16 peak): {mfu}.",
        f"- `acceltrain plan --target here` for the same job: {summary['plan_recommended']}{compute}, "
        f"{size(summary['planned_bytes'])} a device, against the {size(summary['peak_bytes'])} measured in acceltrain's "
        f"run ({planned_over_peak} of it).",
        f"- Where acceltrain's run's {summary['ledger_seconds']:.0f} s went (the ledger): {ledger}. `--verify 3` said: "
        f"{_results.not_recorded(summary['verify'])}.",
    ])


def quotes(summary: dict, record: dict) -> dict:
    """`summary`: acceltrain's steady step beside plain Keras's in the same dtype policy (and plain Keras's own
    default labelled), one run each, so no verdict; where acceltrain's run's time went."""
    runs = summary["runs"]
    accel = runs["acceltrain run"]
    policy = accel["dtype_policy"]
    same = next((run for name, run in runs.items() if name != "acceltrain run" and run["dtype_policy"] == policy), None)
    default = next((run for name, run in runs.items() if name != "acceltrain run" and run["dtype_policy"] == "float32"),
                   None)
    parts = summary["ledger_parts"]
    largest = sorted(parts.items(), key=lambda item: -item[1])[:2]
    said = (f"{summary['model']['parameters'] / 1e6:.0f}M parameters, LoRA rank {summary['model']['lora_rank']} "
            f"({_results.cite(record)}; each run one fresh process, once, so no noise is known and no verdict given): "
            f"`acceltrain run`'s steady step {1000 * accel['steady_step_seconds']:.1f} ms in {policy}")
    if same:
        said += f", plain Keras's {1000 * same['steady_step_seconds']:.1f} ms in the same policy"
    if default and policy != "float32":
        said += f" ({1000 * default['steady_step_seconds']:.1f} ms in its own default, float32)"
    said += (f"; of acceltrain's run's {summary['ledger_seconds']:.0f} s, "
             + " and ".join(f"{name.replace('_', ' ')} took {seconds / summary['ledger_seconds']:.0%}"
                            for name, seconds in largest) + ".")
    return {"summary": said}


if __name__ == "__main__":
    main()
