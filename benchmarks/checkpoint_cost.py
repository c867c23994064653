"""What a checkpoint costs the training: synchronous .weights.h5 vs Orbax's asynchronous sharded save.

    python benchmarks/checkpoint_cost.py [--rounds 3] [--quick]

Two jobs, each through connect() → scope() → Runtime.fit on JAX with a checkpoint every few steps:
  - mnist: the seed's MNIST MLP (0.6M parameters), one device, batch 1200, 50 steps an epoch;
  - wide: a 25M-parameter MLP with Adam (75M values a checkpoint) sharded over 8 simulated CPU devices
    (kernels split along a "model" axis), random data, batch 64, 8 steps an epoch; run in its own
    process, since the device count is fixed when JAX starts.
Each job runs three ways, interleaved round by round: no checkpoints, the .weights.h5 checkpoints
(what TensorFlow runs use; process 0 gathers and writes while training waits), and Orbax's (each
process writes its shards in the background; a step waits only for the copy to host memory). A run's
steady epoch is the median of its epochs after the first; a checkpoint's cost is the steady epoch's
growth over the run without checkpoints, divided by the checkpoints an epoch writes, stated only where
it exceeds the rounds' spread (benchmarks/_noise.py; a checkpoint only adds work, so a run whose
checkpointed epochs came out faster is inconclusive). Records the section "checkpoint-cost". --quick: 1
round of 2 epochs each.
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

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _noise, _results  # noqa: E402

SECTION = "checkpoint-cost"
WAYS = ("none", "h5", "orbax")
FORMATS = {"h5": ".weights.h5", "orbax": "Orbax"}
JOBS = {  # name: (steps an epoch, a checkpoint every N steps, epochs)
    "mnist": (50, 10, 4),
    "wide": (8, 4, 3),
}
DESCRIBED = {"mnist": "the seed's MLP on one device", "wide": "a 3-layer MLP with Adam sharded over 8 simulated CPU "
                                                               "devices (kernels split along a model axis)"}


def run_job(job: str, way: str, epochs: int) -> dict:
    """One run of `job` checkpointing `way`; its steady epoch in seconds (in this process)."""
    import acceltrain

    runtime = acceltrain.connect(simulate_devices=8 if job == "wide" else None,
                                 distribution="none" if job == "wide" else "auto", verbose=False)
    runtime.seed(0)
    import keras
    import numpy as np

    from acceltrain.training import resumable

    steps, every, _ = JOBS[job]
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
    return {"epoch_seconds": seconds, "steady": statistics.median(seconds[1:]), "params": model.count_params(),
            "checkpoints_per_epoch": steps // every, "load": os.getloadavg()[0]}


def _in_subprocess(job: str, way: str, epochs: int) -> dict:
    result = subprocess.run([sys.executable, __file__, "--one", job, way, str(epochs)], capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(_results.REPO / "src")})
    if result.returncode:
        sys.exit(f"{job}/{way} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--one", nargs=3, metavar=("JOB", "WAY", "EPOCHS"), help=argparse.SUPPRESS)
    _results.add_arguments(parser)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_job(args.one[0], args.one[1], int(args.one[2]))))
        return
    run = _results.Run(__file__, args)
    rounds = 1 if args.quick else args.rounds
    jobs = {job: {"steps_per_epoch": steps, "every": every, "epochs": 2 if args.quick else epochs,
                  "runs": {way: [] for way in WAYS}} for job, (steps, every, epochs) in JOBS.items()}
    for round_ in range(rounds):
        for job, found in jobs.items():
            for way in WAYS:  # interleaved: the machine's load drifts the same for all three
                found["runs"][way].append(_in_subprocess(job, way, found["epochs"]))
                print(f"round {round_ + 1}: {job} {way}: {found['runs'][way][-1]}", file=sys.stderr, flush=True)
    run.save(SECTION, {"rounds": rounds, "jobs": jobs})


# --- Rendering ----------------------------------------------------------------------------------

def summarize(raw: dict) -> dict:
    jobs = {}
    for job, found in raw["jobs"].items():
        first = found["runs"]["none"][0]
        none = statistics.median(r["steady"] for r in found["runs"]["none"])
        ways = {}
        for way, runs in found["runs"].items():
            median = statistics.median(r["steady"] for r in runs)
            ways[way] = {"median": median, "spread": _noise.spread([r["steady"] for r in runs]),
                         "over_none": median / none,
                         "per_checkpoint": (median - none) / first["checkpoints_per_epoch"]}
        jobs[job] = {"params": first["params"], "steps_per_epoch": found["steps_per_epoch"], "every": found["every"],
                     "epochs": found["epochs"], "checkpoints_per_epoch": first["checkpoints_per_epoch"], "ways": ways}
    loads = [r["load"] for found in raw["jobs"].values() for runs in found["runs"].values() for r in runs]
    return {"rounds": raw["rounds"], "jobs": jobs, "loads": [min(loads), max(loads)]}


def costs(job: dict) -> dict:
    """way → its steady epoch over none's, judged against the rounds' spread, for h5 and orbax."""
    none = job["ways"]["none"]
    return {way: _noise.judge(job["ways"][way]["over_none"], (none["spread"], job["ways"][way]["spread"]),
                              adds_work=True) for way in WAYS[1:]}


def cost_words(difference: _noise.Difference, per_checkpoint: float, unit: str = "") -> str:
    if difference.verdict == _noise.INCONCLUSIVE:
        return "inconclusive"
    if difference.verdict == _noise.WITHIN:
        return "none beyond the noise"
    return f"{per_checkpoint * 1000:+.0f} ms{unit}" + (" (noise unknown)" if difference.noise is None else "")


def render(summary: dict, record: dict) -> str:
    cores = record["machine"].get("cores")
    table = ["| job | checkpoints | steady epoch (median) | spread over rounds | per checkpoint, over none | "
             "epoch / none's |", "|---|---|---|---|---|---|"]
    shares, inconclusive, compared = [], 0, 0
    for name, job in summary["jobs"].items():
        label = f"{name} ({job['params'] / 1e6:.1f}M parameters)"
        found = costs(job)
        for way in WAYS:
            mine = job["ways"][way]
            spread = _results.not_recorded(mine["spread"], "{:.0%}")
            if way == "none":
                table.append(f"| {label} | none | {mine['median']:.3f} s | {spread} |  | 1.000× (the control) |")
                continue
            difference, per = found[way], mine["per_checkpoint"]
            compared += 1
            inconclusive += difference.verdict == _noise.INCONCLUSIVE
            table.append(f"| {label} | {way} | {mine['median']:.3f} s | {spread} | {cost_words(difference, per)} | "
                         f"{difference.says('{:.3f}×')} |")
        h5, orbax = found["h5"], found["orbax"]
        h5_per, orbax_per = job["ways"]["h5"]["per_checkpoint"], job["ways"]["orbax"]["per_checkpoint"]
        stated = (_noise.HIGHER, _noise.UNKNOWN)
        if h5.verdict in stated and orbax.verdict in stated and h5_per > 0:
            unmeasured = " (noise unknown)" if _noise.UNKNOWN in (h5.verdict, orbax.verdict) else ""
            shares.append(f"{name}: {orbax_per / h5_per:.2f}×{unmeasured}")
        else:
            shares.append(f"{name}: not stated (a cost within the noise or inconclusive)")
    verdict = (f" {inconclusive} of {compared} comparisons are inconclusive: this run does not measure what a "
               "checkpoint costs there; rerun it on a quiet machine." if inconclusive else "")
    jobs = summary["jobs"]
    return (
        "## What a checkpoint costs the training: synchronous .weights.h5 vs Orbax asynchronous\n\n"
        f"`{record['command']}`; JAX. "
        + " ".join(f"{name}: {DESCRIBED.get(name, name)}, {job['steps_per_epoch']} steps an epoch, a checkpoint every "
                   f"{job['every']} steps, {job['epochs']} epochs." for name, job in jobs.items())
        + f" Each run its own process, the three ways interleaved over {summary['rounds']} round(s). A run's steady "
        "epoch is the median of its epochs after the first; each way's figure is the median over the rounds, and "
        "the larger spread over the rounds of a way and of none is the noise its cost is judged against "
        "(benchmarks/_noise.py: checkpoints only add work, so checkpointed epochs faster than none's beyond the "
        f"noise, or with no noise measured, are inconclusive). Its runs started at "
        f"{_results.load_range(summary['loads'], cores)}."
        + (f" The wide job's 8 devices are simulated: they and Orbax's background writer share this machine's "
           f"{cores} cores." if "wide" in jobs else "") + f"{verdict}\n\n" + "\n".join(table)
        + f"\n\nOrbax's cost to training per checkpoint, as a share of .weights.h5's: {'; '.join(shares)}."
    )


def quotes(summary: dict, record: dict) -> dict:
    """`summary`: each job's cost per checkpoint of each format, or why the run states none."""
    parts = []
    for name, job in summary["jobs"].items():
        found = costs(job)
        words = [f"{FORMATS[way]}, {cost_words(found[way], job['ways'][way]['per_checkpoint'], ' a checkpoint')}"
                 for way in WAYS[1:]]
        parts.append(f"{name} ({job['params'] / 1e6:.1f}M parameters): {'; '.join(words)}")
    return {"summary": f"What a checkpoint cost the training ({_results.cite(record)}): " + ". ".join(parts) + ".",
            "orbax-over-h5": orbax_over_h5(summary)}


def orbax_over_h5(summary: dict) -> str:
    """Each job's Orbax checkpoint cost over its .weights.h5 one, where both costs lie beyond the noise: the half of
    the comparison that does not favour the background write is said beside the half that does."""
    said = []
    for name, job in summary["jobs"].items():
        found = costs(job)
        if all(found[way].verdict == _noise.HIGHER for way in ("h5", "orbax")):
            ratio = job["ways"]["orbax"]["per_checkpoint"] / job["ways"]["h5"]["per_checkpoint"]
            said.append(f"{ratio:.2f}× on {name}")
        else:
            said.append(f"not shown on {name} (a cost within the noise)")
    return "an Orbax checkpoint cost " + ", ".join(said) + " what a .weights.h5 one did"


if __name__ == "__main__":
    main()
