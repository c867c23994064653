"""Peak memory of a script's model laid out by 'auto' before its first step, on 8 simulated CPU devices.

A plain script builds its model in scope() (acceltrain run), so 'auto' cannot weigh it before it exists. Two ways to
still lay it out sharded, measured side by side on the same model (a 3-layer MLP of width 4096, 50.3M parameters,
201 MB of float32 weights, Adam), each in its own process:
- moved: built as data parallel builds it (every variable whole on every device), then, at the first fit, each
  variable moved to its fsdp layout;
- born: 'auto' with a device memory (acceltrain's): each variable born whole while a device's training state stays
  within the budget and cut past it (sharding.born_cut), then moved at the first fit (Runtime.first_fit);
- control: Runtime.build, which weighs the model under jax.eval_shape first and builds it born fsdp.
Figures in copies of the weight bytes: the most any one device held (JAX's live arrays, read from their shards
after the build and as each variable moved: what a real accelerator must have), and the process's peak resident
memory during the build over its memory just before it (on simulated devices every device's memory is this
process's; the first fit's compiles, which the moved variant does not make, are left out). `--repeats` runs of each, interleaved; the spread is the noise the comparison is judged by.

    python benchmarks/auto_placement.py [--repeats 2] [--quick]   # records the section "auto-placement"

--quick: width 512, one run each.
"""

import argparse
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _child, _noise, _results  # noqa: E402

SECTION = "auto-placement"
WIDTH, LAYERS = 4096, 3
DEVICE_MEMORY = "256MiB"  # the training state replicated is 805 MB: 'auto' must shard it
VARIANTS = {  # key: (label, settings)
    "moved": ("built whole (data parallel), moved to fsdp at the first fit", dict(distribution="data", move=True)),
    "born": ("'auto': born within the budget, moved at the first fit", dict(distribution="auto")),
    "control": ("control: Runtime.build (eval_shape, then born fsdp)", dict(distribution="auto", build=True)),
}

CHILD = r"""
import json, resource, sys
import numpy as np
import acceltrain
settings = json.loads(sys.argv[1])
width, layers, memory = settings["width"], settings["layers"], settings["device_memory"]
runtime = acceltrain.connect(simulate_devices=8, distribution=settings["distribution"],
                             device_memory=None if settings["distribution"] == "data" else memory, verbose=False)
import jax, keras
from acceltrain.backends import keras_internals

def build(width=width):
    model = keras.Sequential([keras.Input((width,))] + [keras.layers.Dense(width) for _ in range(layers)])
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    return model

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096

def device_max():
    held = {}
    for array in jax.live_arrays():
        for shard in array.addressable_shards:
            held[shard.device.id] = held.get(shard.device.id, 0) + shard.data.nbytes
    return max(held.values(), default=0)

with runtime.scope():  # XLA's start-up and compiler memory first, so that it is not the build's
    build(64)
before, before_device = rss(), device_max()
if settings.get("build"):
    model = runtime.build(build)
else:
    with runtime.scope():
        model = build()
jax.block_until_ready([v.value for v in model.weights])
weights = sum(v.value.nbytes for v in model.weights)
built = {"device": device_max() - before_device, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before}

moving = [0]
set_layout = keras_internals.set_layout
def sampled(variable, layout, value=None):  # the most a device holds while each variable moves
    moving[0] = max(moving[0], device_max() - before_device)
    set_layout(variable, layout, value)
keras_internals.set_layout = sampled
x = np.zeros((64, width), np.float32)
if settings.get("move"):
    fsdp = runtime.backend_module.candidate_distribution("fsdp", runtime.hardware.devices)
    runtime.backend_module.relayout(model.variables, fsdp)
else:
    runtime.first_fit(model, x, x, batch_size=64)
jax.block_until_ready([v.value for v in model.weights])
moving[0] = max(moving[0], device_max() - before_device)
print(json.dumps({"weights": weights, "built_device": built["device"], "built_peak": built["peak"],
                  "moving_device": moving[0],
                  "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before,
                  "first_device": runtime.backend_module.first_device_bytes(model.weights),
                  "distribution": "FSDP (moved here)" if settings.get("move") else runtime.distribution_name}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    width, repeats = (512, 1) if args.quick else (WIDTH, args.repeats)
    memory = "4MiB" if args.quick else DEVICE_MEMORY  # the quick model's state (12.6 MB) must not fit either
    variants = {key: {"label": label, "settings": settings, "runs": []} for key, (label, settings) in VARIANTS.items()}
    common = {"width": width, "layers": LAYERS, "device_memory": memory}
    _child.interleaved(variants, repeats, lambda settings: _child.run(CHILD, {**settings, **common}, timeout=1800))
    run.save(SECTION, {"width": width, "layers": LAYERS, "device_memory": memory, "repeats": repeats,
                       "variants": variants})


# --- Rendering ----------------------------------------------------------------------------------

FIGURES = ("built_device", "moving_device", "built_peak")


def summarize(raw: dict) -> dict:
    variants = {}
    for key, variant in raw["variants"].items():
        runs = variant["runs"]
        figures = {name: [run[name] / run["weights"] for run in runs] for name in FIGURES}
        variants[key] = {"label": variant["label"], "distribution": runs[0]["distribution"],
                         **{name: statistics.median(values) for name, values in figures.items()},
                         "spread": _noise.spread(figures["built_peak"]),
                         "first_device_share": runs[0]["first_device"] / runs[0]["weights"]}
    return {"width": raw["width"], "layers": raw["layers"], "device_memory": raw["device_memory"],
            "repeats": raw["repeats"], "weights_bytes": raw["variants"]["born"]["runs"][0]["weights"],
            "variants": variants}


def difference(summary: dict, treatment: str, control: str) -> _noise.Difference:
    variants = summary["variants"]
    return _noise.judge(variants[treatment]["built_peak"] / variants[control]["built_peak"],
                        (variants[treatment]["spread"], variants[control]["spread"]))


def render(summary: dict, record: dict) -> str:
    variants = summary["variants"]
    lines = [
        "## Peak memory of a script's model laid out by 'auto' (8 simulated CPU devices)",
        "",
        f"`{record['command']}`. A model built in scope(), as `acceltrain run` builds a script's: a "
        f"{summary['layers']}-layer MLP of width {summary['width']} ({summary['weights_bytes'] / 1e6:.0f} MB of float32 "
        f"weights) with Adam, `--device-memory {summary['device_memory']}`; each variant in its own process, "
        f"{summary['repeats']} time(s), interleaved. In copies of the weight bytes: the most one device held "
        "(JAX's live arrays, read after the build and as each variable moved) and the process's peak resident "
        "memory during the build over its memory before it (every simulated device's memory is this process's; "
        "the first fit's compiles are left out); the median over the runs.",
        "",
        "| variant | ends as | a device after the build | a device while moving | process peak of the build | spread "
        "| first device holds |",
        "|---|---|---|---|---|---|---|",
    ]
    for variant in variants.values():
        lines.append(f"| {variant['label']} | {variant['distribution']} | {variant['built_device']:.2f} | "
                     f"{variant['moving_device']:.2f} | {variant['built_peak']:.2f} | "
                     f"{_results.not_recorded(variant['spread'], '{:.0%}')} | "
                     f"{variant['first_device_share']:.3f} of the weights |")
    born, moved = variants["born"], variants["moved"]
    lines += [
        "",
        f"What this run says: born within the budget, a device held at most {born['moving_device']:.2f} copies of "
        f"the weights at any point measured, against {moved['moving_device']:.2f} when the model is built whole and "
        f"moved; building peaked at {born['built_peak']:.2f} against {moved['built_peak']:.2f} (born over moved: "
        f"{difference(summary, 'born', 'moved').says()}). Measured on simulated CPU devices only.",
    ]
    return "\n".join(lines)


# Quotes whose figures a busy machine does not change (copies of the weights a device held):
# quoted from a loaded record too (render.py).
LOAD_FREE = ("summary",)


def quotes(summary: dict, record: dict) -> dict:
    """`summary`: the peak of a script's model laid out by 'auto', in one sentence."""
    born, moved = summary["variants"]["born"], summary["variants"]["moved"]
    return {"summary": (
        f"a script's model laid out by 'auto' needed at most {born['moving_device']:.2f} copies of its weights on a "
        f"device at once (built whole and then moved: {moved['moving_device']:.2f}), and ends with "
        f"{born['first_device_share']:.3f} of them on the first device ({_results.cite(record)})."
    )}


if __name__ == "__main__":
    main()
