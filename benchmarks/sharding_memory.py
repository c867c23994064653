"""Peak host memory while building a model whose weights are sharded over 8 simulated CPU devices.

On simulated devices every device's memory is this process's memory, so the peak resident memory of the
build, over the weight bytes, says how many copies of the weights existed at once:
- born sharded (Runtime.build under fsdp): each weight laid out as it is created;
- auto with a small --device-memory: the same, after measuring the model under jax.eval_shape;
- built whole, then sharded (what `from_preset` under ModelParallel does, keras#21634);
- data parallel (every device a replica);
- a control without Keras: JAX's own sharded random init of one kernel.
Each variant runs in its own process, `--repeats` times (the spread is the noise the comparisons are judged
by, benchmarks/_noise.py); the figure is its peak RSS (ru_maxrss) minus its RSS just before the build, over
the model's weight bytes.

    python benchmarks/sharding_memory.py [--repeats 2] [--quick]   # records the section "sharding-memory"

--quick: width 512, one run each.
"""

import argparse
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _child, _noise, _results  # noqa: E402

SECTION = "sharding-memory"
WIDTH, LAYERS = 4096, 3  # 50.3M parameters, 201 MB of float32 weights
VARIANTS = {  # key: (label, settings)
    "born": ("born sharded (fsdp, Runtime.build)", dict(distribution="fsdp")),
    "auto": ("auto, --device-memory 256MiB (eval_shape, then fsdp)", dict(distribution="auto", device_memory="256MiB")),
    "whole": ("built whole, then sharded (device_put)", dict(distribution="none", then_shard=True)),
    "data": ("data parallel (a replica per device)", dict(distribution="data")),
    "control": ("control: plain jax.jit(jax.random.uniform, out_shardings) of one kernel",
                dict(distribution="fsdp", control=True)),
}

CHILD = r"""
import json, resource, sys
import acceltrain
settings = json.loads(sys.argv[1])
width, layers = settings["width"], settings["layers"]
runtime = acceltrain.connect(simulate_devices=8, distribution=settings["distribution"],
                             device_memory=settings.get("device_memory"), verbose=False)

def build(width=width):
    import keras
    model = keras.Sequential([keras.Input((width,))] + [keras.layers.Dense(width) for _ in range(layers)])
    return model

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096

import keras, jax
runtime.build(lambda: build(64))  # a small build first: XLA's own start-up and compiler memory is not the build's
before = rss()
if settings.get("control"):  # no Keras: JAX's own sharded random init of one kernel, as Keras does it
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    sharded = NamedSharding(Mesh(jax.devices(), ("batch",)), PartitionSpec("batch", None))
    kernel = jax.jit(lambda key: jax.random.uniform(key, (width, width)), out_shardings=sharded)(jax.random.key(0))
    kernel.block_until_ready()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"peak_over_baseline": peak - before, "weights": kernel.nbytes, "first_device": kernel.nbytes // 8,
                      "distribution": "jax.jit"}))
    sys.exit(0)
model = runtime.build(build)
if settings.get("then_shard"):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    mesh = Mesh(jax.devices(), ("batch",))
    for v in model.weights:
        spec = PartitionSpec("batch", None) if len(v.shape) == 2 else PartitionSpec()
        v.assign(jax.device_put(v.value, NamedSharding(mesh, spec)))
jax.block_until_ready([v.value for v in model.weights])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
weights = sum(v.value.nbytes for v in model.weights)
first = runtime.backend_module.first_device_bytes(model.weights) if not settings.get("then_shard") else None
print(json.dumps({"peak_over_baseline": peak - before, "weights": weights, "first_device": first,
                  "distribution": runtime.distribution_name}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    width, repeats = (512, 1) if args.quick else (WIDTH, args.repeats)
    variants = {key: {"label": label, "settings": settings, "runs": []} for key, (label, settings) in VARIANTS.items()}
    common = {"width": width, "layers": LAYERS}
    _child.interleaved(variants, repeats, lambda settings: _child.run(CHILD, {**settings, **common}, timeout=900))
    run.save(SECTION, {"width": width, "layers": LAYERS, "repeats": repeats, "variants": variants})


# --- Rendering ----------------------------------------------------------------------------------

def summarize(raw: dict) -> dict:
    variants = {}
    for key, variant in raw["variants"].items():
        copies = [r["peak_over_baseline"] / r["weights"] for r in variant["runs"]]
        first = variant["runs"][0]
        variants[key] = {"label": variant["label"], "distribution": first["distribution"],
                         "copies": statistics.median(copies), "spread": _noise.spread(copies),
                         "first_device_share": None if first["first_device"] is None else
                         first["first_device"] / first["weights"]}
    return {"width": raw["width"], "layers": raw["layers"], "repeats": raw["repeats"],
            "weights_bytes": raw["variants"]["born"]["runs"][0]["weights"], "variants": variants}


def difference(summary: dict, treatment: str, control: str) -> _noise.Difference:
    variants = summary["variants"]
    return _noise.judge(variants[treatment]["copies"] / variants[control]["copies"],
                        (variants[treatment]["spread"], variants[control]["spread"]))


def render(summary: dict, record: dict) -> str:
    variants = summary["variants"]
    lines = [
        "## Peak host memory while building a sharded model (8 simulated CPU devices)",
        "",
        f"`{record['command']}`. A {summary['layers']}-layer MLP of width {summary['width']} "
        f"({summary['weights_bytes'] / 1e6:.0f} MB of float32 weights); each variant in its own process, "
        f"{summary['repeats']} time(s), interleaved. Peak: the build's peak resident memory over the process's memory "
        "just before it, in copies of the weights (on simulated devices every device's memory is this process's); "
        "the median over the runs, their spread the noise the comparisons are judged by. The baseline is taken "
        "after a small build of the same layers, so XLA's start-up and compiler memory are not counted; ru_maxrss "
        "is the process's lifetime peak.",
        "",
        "| variant | distribution | peak / weight bytes | spread over runs | first device holds |",
        "|---|---|---|---|---|",
    ]
    for variant in variants.values():
        first = ("-" if variant["first_device_share"] is None else
                 f"{variant['first_device_share']:.3f} of the weights")
        lines.append(f"| {variant['label']} | {variant['distribution']} | {variant['copies']:.2f} | "
                     f"{_results.not_recorded(variant['spread'], '{:.0%}')} | {first} |")
    born, whole, control = (variants[key]["copies"] for key in ("born", "whole", "control"))
    over_whole, data_over_born = difference(summary, "born", "whole"), difference(summary, "data", "born")
    relation = {_noise.LOWER: "under", _noise.HIGHER: "above", _noise.WITHIN: "no different from"}.get(
        over_whole.verdict, "against")
    control_says = ("the transient is in generating random numbers under jit here, not in the layout"
                    if control > 1 else "so generating random numbers under jit adds no transient here")
    lines += [
        "",
        f"What this run says: weights born sharded peaked at {born:.2f} copies of the weights, {relation} the "
        f"{whole:.2f} of building whole then sharding (born over whole: {over_whole.says()}); data parallel "
        f"over born sharded: {data_over_born.says('{:.1f}×')}; the first device ends with "
        f"{variants['born']['first_device_share']:.3f} of the weights. JAX's own sharded random init of one kernel, "
        f"without Keras, peaked at {control:.2f}× that kernel on this CPU backend: {control_says}. Measured on "
        "simulated CPU devices only: a GPU or TPU backend may partition it differently.",
    ]
    return "\n".join(lines)


# Quotes whose figures a busy machine does not change (bytes and copies of the weights):
# quoted from a loaded record too (render.py).
LOAD_FREE = ("summary",)


def quotes(summary: dict, record: dict) -> dict:
    """`summary`: what building born sharded cost against the other ways, in one sentence."""
    variants = summary["variants"]
    return {"summary": (
        f"built born sharded, the first device holds {variants['born']['first_device_share']:.3f} of the weights and "
        f"the build peaked at {variants['born']['copies']:.2f} copies of them, against "
        f"{variants['data']['copies']:.2f} for data parallel (data parallel over born sharded: "
        f"{difference(summary, 'data', 'born').says('{:.1f}×')}) and {variants['whole']['copies']:.2f} for building "
        f"whole then sharding (born over whole: {difference(summary, 'born', 'whole').says()}); JAX's own sharded "
        f"random init of one kernel peaked at {variants['control']['copies']:.2f}× the kernel "
        f"({_results.cite(record)})."
    )}


if __name__ == "__main__":
    main()
