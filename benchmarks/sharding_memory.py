"""Peak host memory while building a model whose weights are sharded over 8 simulated CPU devices.

On simulated devices every device's memory is this process's memory, so the peak resident memory of the
build, over the weight bytes, says how many copies of the weights existed at once:
- born sharded (Runtime.build under fsdp): each weight laid out as it is created; about 1 copy;
- auto with a small --device-memory: the same, after measuring the model under jax.eval_shape;
- built whole, then sharded (what `from_preset` under ModelParallel does, keras#21634): about 2;
- data parallel (every device a replica): about 8.
Each variant runs in its own process; the figure is its peak RSS (ru_maxrss) minus its RSS just before
the build, over the model's weight bytes.

    python benchmarks/sharding_memory.py            # writes its section of BENCHMARKS.md
"""

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, write_section  # noqa: E402

WIDTH, LAYERS = 4096, 3  # 50.3M parameters, 201 MB of float32 weights
VARIANTS = {
    "born sharded (fsdp, Runtime.build)": dict(distribution="fsdp"),
    "auto, --device-memory 256MiB (eval_shape, then fsdp)": dict(distribution="auto", device_memory="256MiB"),
    "built whole, then sharded (device_put)": dict(distribution="none", then_shard=True),
    "data parallel (a replica per device)": dict(distribution="data"),
    "control: plain jax.jit(jax.random.uniform, out_shardings) of one kernel": dict(distribution="fsdp", control=True),
}

CHILD = r"""
import json, resource, sys
import acceltrain
settings = json.loads(sys.argv[1])
runtime = acceltrain.connect(simulate_devices=8, distribution=settings["distribution"],
                             device_memory=settings.get("device_memory"), verbose=False)

def build(width=%(width)d):
    import keras
    model = keras.Sequential([keras.Input((width,))] + [keras.layers.Dense(width) for _ in range(%(layers)d)])
    return model

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096

import keras, jax
runtime.build(lambda: build(64))  # a small build first: XLA's own start-up and compiler memory is not the build's
before = rss()
if settings.get("control"):  # no Keras: JAX's own sharded random init of one kernel, as Keras does it
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    sharded = NamedSharding(Mesh(jax.devices(), ("batch",)), PartitionSpec("batch", None))
    kernel = jax.jit(lambda key: jax.random.uniform(key, (%(width)d, %(width)d)), out_shardings=sharded)(jax.random.key(0))
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
""" % {"width": WIDTH, "layers": LAYERS}


def measure(settings: dict) -> dict:
    result = subprocess.run([sys.executable, "-c", CHILD, json.dumps(settings)], capture_output=True, text=True,
                            timeout=900)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    rows = []
    for name, settings in VARIANTS.items():
        found = measure(settings)
        rows.append((name, found))
        print(name, found, flush=True)
    weights = rows[0][1]["weights"]
    lines = [
        "## Peak host memory while building a sharded model (8 simulated CPU devices)",
        "",
        f"`python benchmarks/sharding_memory.py` on {machine()}. A {LAYERS}-layer MLP of width {WIDTH} "
        f"({weights / 1e6:.0f} MB of float32 weights); each variant in its own process. Peak: the build's peak "
        "resident memory over the process's memory just before it, in copies of the weights (on simulated "
        "devices every device's memory is this process's). The baseline is taken after a small build of the same "
        "layers, so XLA's start-up and compiler memory are not counted; ru_maxrss is the process's lifetime peak.",
        "",
        "| variant | distribution | peak / weight bytes | first device holds |",
        "|---|---|---|---|",
    ]
    for name, found in rows:
        first = "-" if found["first_device"] is None else f"{found['first_device'] / found['weights']:.3f} of the weights"
        lines.append(f"| {name} | {found['distribution']} | {found['peak_over_baseline'] / found['weights']:.2f} | {first} |")
    copies = {name: found["peak_over_baseline"] / found["weights"] for name, found in rows}
    born, whole, control = (copies[name] for name in (list(VARIANTS)[0], list(VARIANTS)[2], list(VARIANTS)[4]))
    born_found = dict(rows)[list(VARIANTS)[0]]
    born_first = born_found["first_device"] / born_found["weights"]
    control_says = ("the transient is in generating random numbers under jit here, not in the layout"
                    if control > 1 else "so generating random numbers under jit adds no transient here")
    lines += [
        "",
        f"What this run says: weights born sharded peaked at {born:.2f} copies of the weights, "
        f"{'under' if born < whole else 'not under'} the {whole:.2f} of building whole then sharding, and "
        f"{copies[list(VARIANTS)[3]] / born:.1f}× less than data parallel; the first device ends with "
        f"{born_first:.3f} of the weights. JAX's own sharded random init of one kernel, without Keras, peaked at "
        f"{control:.2f}× that kernel on this CPU backend: {control_says}. "
        "A GPU or TPU backend may partition it differently; not measured (no accelerator here).",
    ]
    write_section("sharding-memory", "\n".join(lines))


if __name__ == "__main__":
    main()
