"""What a checkpoint costs the training: synchronous .weights.h5 vs Orbax's asynchronous sharded save.

    python benchmarks/checkpoint_cost.py [--rounds 3]

Two jobs, each through connect() → scope() → Runtime.fit on JAX with a checkpoint every few steps:
  - mnist: the seed's MNIST MLP (0.6M parameters), one device, batch 1200, 50 steps an epoch;
  - wide: a 25M-parameter MLP with Adam (75M values a checkpoint) sharded over 8 simulated CPU devices
    (kernels split along a "model" axis), random data, batch 64, 8 steps an epoch; run in its own
    process, since the device count is fixed when JAX starts.
Each job runs three ways, interleaved round by round: no checkpoints, the .weights.h5 checkpoints
(what TensorFlow runs use; process 0 gathers and writes while training waits), and Orbax's (each
process writes its shards in the background; a step waits only for the copy to host memory). A run's
steady epoch is the median of its epochs after the first; a checkpoint's cost is the steady epoch's
growth over the run without checkpoints, divided by the checkpoints an epoch writes. Writes the section
"checkpoint-cost" of BENCHMARKS.md.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _report import machine, write_section

WAYS = ("none", "h5", "orbax")
JOBS = {  # name: (steps an epoch, a checkpoint every N steps, epochs)
    "mnist": (50, 10, 4),
    "wide": (8, 4, 3),
}


def run_job(job: str, way: str) -> dict:
    """One run of `job` checkpointing `way`; its steady epoch in seconds (in this process)."""
    import acceltrain

    runtime = acceltrain.connect(simulate_devices=8 if job == "wide" else None,
                                 distribution="none" if job == "wide" else "auto", verbose=False)
    runtime.seed(0)
    import keras
    import numpy as np

    from acceltrain.training import resumable

    steps, every, epochs = JOBS[job]
    if job == "mnist":
        from acceltrain.datasets import load_npz
        from acceltrain.recipes import mnist_mlp

        splits = load_npz()
        x, y = mnist_mlp.preprocess(splits.x_train, splits.y_train)
        with runtime.scope():
            model = mnist_mlp.build_model()
        batch, distribution = 1200, contextlib.nullcontext()
    else:
        x = np.random.default_rng(0).normal(size=(64 * steps, 2048)).astype("float32")
        y = np.random.default_rng(1).integers(0, 16, size=64 * steps).astype("int32")
        devices = keras.distribution.list_devices()
        mesh = keras.distribution.DeviceMesh((1, len(devices)), ["batch", "model"], devices)
        layouts = keras.distribution.LayoutMap(mesh)
        layouts[".*kernel"] = (None, "model")
        distribution = keras.distribution.ModelParallel(layout_map=layouts, batch_dim_name="batch")
        with distribution.scope():
            model = keras.Sequential([keras.Input((2048,)), keras.layers.Dense(4096, activation="relu"),
                                      keras.layers.Dense(4096, activation="relu"), keras.layers.Dense(16)])
            model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        batch = 64
    distribution_scope = distribution if job == "mnist" else distribution.scope()
    chosen = resumable.open_checkpoints
    if way == "h5":  # the TensorFlow backend's format, on JAX: the same loop, only the writer differs
        resumable.open_checkpoints = lambda folder, keep, backend, index=0: chosen(folder, keep, "tensorflow", index)
    with tempfile.TemporaryDirectory(prefix="acceltrain-bench-", dir=os.environ.get("BENCH_DIR")) as folder, \
            distribution_scope:
        history = runtime.fit(model, x, y, batch_size=batch, epochs=epochs, verbose=0,
                              checkpoint_dir=None if way == "none" else folder, checkpoint_every=f"{every} steps")
    seconds = history.epoch_seconds
    return {"steady": statistics.median(seconds[1:]), "params": model.count_params(),
            "checkpoints_per_epoch": steps // every, "load": os.getloadavg()[0]}


def _in_subprocess(job: str, way: str) -> dict:
    result = subprocess.run([sys.executable, __file__, "--one", job, way], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")})
    if result.returncode:
        sys.exit(f"{job}/{way} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--one", nargs=2, metavar=("JOB", "WAY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_job(*args.one)))
        return
    results = {(job, way): [] for job in JOBS for way in WAYS}
    for round_ in range(args.rounds):
        for job in JOBS:
            for way in WAYS:  # interleaved: the machine's load drifts the same for all three
                results[job, way].append(_in_subprocess(job, way))
                print(f"round {round_ + 1}: {job} {way}: {results[job, way][-1]}", file=sys.stderr, flush=True)
    table = ["| job | checkpoints | steady epoch (median) | per checkpoint, over none | epoch / none's |",
             "|---|---|---|---|---|"]
    loads = [r["load"] for runs in results.values() for r in runs]
    per_checkpoint = {}
    for job in JOBS:
        base = statistics.median(r["steady"] for r in results[job, "none"])
        first = results[job, "none"][0]
        for way in WAYS:
            steady = statistics.median(r["steady"] for r in results[job, way])
            per = (steady - base) / first["checkpoints_per_epoch"]
            per_checkpoint[job, way] = per
            cost = "" if way == "none" else f"{per * 1000:+.0f} ms"
            name = f"{job} ({first['params'] / 1e6:.1f}M parameters)"
            table.append(f"| {name} | {way} | {steady:.3f} s | {cost} | {steady / base:.3f}× |")
    summary = "; ".join(f"{job}: {per_checkpoint[job, 'orbax'] / per_checkpoint[job, 'h5']:.2f}×" for job in JOBS
                        if per_checkpoint[job, "h5"] > 0)
    print("\n".join(table) + f"\nOrbax's cost per checkpoint / .weights.h5's: {summary}")
    write_section(
        "checkpoint-cost",
        "## What a checkpoint costs the training: synchronous .weights.h5 vs Orbax asynchronous\n\n"
        f"`python benchmarks/checkpoint_cost.py --rounds {args.rounds}` on {machine()}; JAX. mnist: the seed's MLP on "
        f"one device, {JOBS['mnist'][0]} steps an epoch, a checkpoint every {JOBS['mnist'][1]} steps. wide: a 3-layer "
        f"MLP sharded over 8 simulated CPU devices (kernels split along a model axis), Adam, {JOBS['wide'][0]} steps "
        f"an epoch, a checkpoint every {JOBS['wide'][1]} steps. Each run its own process, the three ways interleaved "
        "round by round; medians over the rounds of each run's steady epoch (the median epoch after the first). "
        f"Load average (1 min) during the runs: {min(loads):.1f} to {max(loads):.1f} on these cores: the machine is "
        "shared, so read the ratios, measured side by side, and treat differences of a few percent as noise. On a "
        "simulated mesh the 8 devices share the same cores and memory, so host copies cost more than on a TPU "
        "host, where the device-to-host copy runs over PCIe while the cores stay free; here Orbax's background "
        "writer also competes with training for the same two cores.\n\n" + "\n".join(table)
        + f"\n\nOrbax's cost to training per checkpoint, as a share of .weights.h5's: {summary}.",
    )


if __name__ == "__main__":
    main()
