"""`acceltrain bench`: how fast a recipe trains here, beside plain Keras, a hand-written loop and the
hardware's own limit, measured in one run on the same machine, in one precision.

    report = run(BenchConfig(recipe="mnist-mlp", epochs=4, batch_size=128))
    print(format_table(report))

What runs, each in its own Python process (one Keras backend per process; each pays its own start-up,
as a user's run does), interleaved so that a neighbour's load falls on all of them alike:
  (a) plain: the recipe's model as a plain Keras user trains it: `model.fit` with Keras's defaults on
      the TensorFlow backend (JAX where TensorFlow is not installed), but in the dtype policy acceltrain
      runs (its own default, float32, is shown beside it);
  (b) acceltrain: connect() → scope() → Runtime.fit, the library's own path, whatever fit does (with
      `checkpoints`, checkpoints as `acceltrain train` writes them, --checkpoint-every auto, timed in the
      epoch). Its first run starts with an empty compilation cache and the later runs find it filled: cold
      and warm start-up;
  (c) hand: a jitted JAX loop written by hand for the same model, weights and optimizer: one
      `lax.scan` per epoch over data placed on the device once, computing in acceltrain's compute dtype. The floor;
  (d) ceiling: the device's matmul throughput in that compute dtype, the best of every round;
  (e) script (BenchConfig.script; benchmarks/epoch_speed.py asks for it): the recipe as a plain Keras script,
      compile + fit on NumPy arrays (SCRIPT), run by `acceltrain run`, in the precision acceltrain run chooses.

Every figure compared is a median: a run's steady epochs (those after its first) give the run's median, a
variant's figure is the median of its runs' medians, and its noise is the spread of those run medians,
(max - min) / min. A ratio of two variants is judged against the larger of their two spreads: the verdict
and its noise come from the same statistic. Beside each epoch's wall time a child records its process's CPU time
(user + system, all threads) and its threads: the table shows the CPU time's medians too, which a neighbour's load
stretches far less than the wall time.

The parent process imports no framework. A child prints one line, RESULT_TAG + JSON, on stdout.
"""

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import asdict, dataclass

from acceltrain import ledger, log
from acceltrain.commands import machine_load
from acceltrain.errors import AcceltrainError, UsageError, positive_int

RESULT_TAG = "ACCELTRAIN_BENCH_RESULT "
LABELS = {
    "plain": "(a) plain Keras fit",
    "acceltrain": "(b) acceltrain",
    "hand": "(c) hand-written loop",
    "ceiling": "(d) matmul ceiling",
    "script": "(e) plain script under acceltrain run",
}
PAYLOAD_ENV = "ACCELTRAIN_BENCH_PAYLOAD"  # the script variant's settings (JSON): its argv stays its own


@dataclass
class BenchConfig:
    recipe: str = "mnist-mlp"
    backend: str | None = None  # acceltrain's backend; the hand loop and the ceiling are JAX
    simulate_devices: int | None = None
    epochs: int = 4  # the first includes compilation; the rest are steady
    repeats: int = 2  # runs of each variant, interleaved; the median of their median steady epochs counts
    samples: int | None = None  # train on the first N samples only (quick checks)
    batch_size: int | None = None  # default: the recipe's
    seed: int = 0
    checkpoints: bool = False  # time acceltrain as `acceltrain train` runs it: checkpoints, 'auto'
    device_data: str = "auto"  # acceltrain's: "off" times it on Keras's own input path (--device-data off)
    script: bool = False  # also (e): the recipe as a plain Keras script under `acceltrain run`


def run(config: BenchConfig, reading: machine_load.Reading | None = None) -> dict:
    """Measure (a), (b), (c) and (d) in child processes and return the report as plain data. `reading`: the
    machine as the measurement began (default: now), whose load the report's line is judged by
    (machine_load.loaded): a benchmark record passes its own, so the line and the record judge the same reading."""
    from acceltrain import recipes

    recipe = recipes.get(config.recipe)
    for name in ("epochs", "repeats"):
        positive_int(getattr(config, name), f"--{name}")
    for name in ("samples", "batch_size"):
        if getattr(config, name) is not None:
            positive_int(getattr(config, name), f"--{name.replace('_', '-')}")
    batch_size = config.batch_size or recipe.BATCH_SIZE
    if config.samples is not None and config.samples < batch_size:  # the hand loop would time no step at all
        default = "" if config.batch_size else ", the recipe default"
        raise UsageError(f"Received --samples {config.samples}, fewer than one batch ({batch_size}{default}): the "
                         "hand-written loop trains on whole batches, so it would time no step and its figures would "
                         f"measure nothing. Pass --samples of at least {batch_size}, or a smaller --batch-size.")

    variants = ("acceltrain", *(("script",) if config.script else ()), "plain", "hand", "ceiling")
    runs = {variant: [] for variant in variants}
    reading = reading or machine_load.Reading.now()
    with tempfile.TemporaryDirectory(prefix="acceltrain-bench-cache-") as cache_dir:
        # acceltrain first: the hand loop and the ceiling follow its compute dtype and platform. The
        # ceiling is measured every round too, so that it sees the same load as the runs beside it.
        for repeat in range(config.repeats):
            for variant in variants:
                extra = {}
                if variant not in ("acceltrain", "script"):
                    first = runs["acceltrain"][0]
                    # one precision for all: the one acceltrain ran in (plain Keras's own default is recorded beside)
                    extra = {"compute_dtype": first["compute_dtype"], "platform": first["runtime"]["platform"],
                             "precision": first["precision"]}
                log.info(f"bench: {LABELS[variant]}, run {repeat + 1} of {config.repeats}")
                runs[variant].append(_run_child(variant, config, batch_size, cache_dir, extra))
    ceiling = max(runs.pop("ceiling"), key=lambda result: result["flops_per_second"])
    return _report(config, recipe, batch_size, runs, ceiling, reading)


# --- The report -------------------------------------------------------------------------------

def run_medians(runs: list[dict], key: str = "epoch_seconds") -> list[float]:
    """Each run's median steady epoch: its epochs after the first (which compiles); all of them if it had one.
    `key` "epoch_cpu_seconds": the same of the process's CPU time (an empty list from a run that has none)."""
    if any(key not in run for run in runs):
        return []
    return [statistics.median(run[key][1:] or run[key]) for run in runs]


def spread(values: list[float]) -> float | None:
    """(max - min) / min of repeated measurements (benchmarks/_noise.py's rule); None for fewer than two."""
    return (max(values) - min(values)) / min(values) if len(values) >= 2 else None


def judged(ratio: float, noises) -> dict:
    """A ratio of two variants' medians with the larger of their runs' spreads, and whether it lies beyond it."""
    noises = list(noises)
    noise = None if any(n is None for n in noises) else max(noises)
    verdict = "noise unknown" if noise is None else ("within noise" if abs(ratio - 1) <= noise else "beyond noise")
    return {"ratio": ratio, "noise": noise, "verdict": verdict}


PAIRS = (("plain", "acceltrain"), ("acceltrain", "hand"), ("plain", "hand"),  # (numerator, denominator)
         ("script", "hand"), ("plain", "script"))  # those of (e), where it ran


def _report(config, recipe, batch_size, runs, ceiling, reading: machine_load.Reading) -> dict:
    accel = runs["acceltrain"][0]
    samples = accel["samples_per_epoch"]
    flops_per_sample = accel["flops_per_sample"]
    runtime = accel["runtime"]
    # A simulated device shares the same cores as the others: the whole CPU is one ceiling.
    devices = 1 if runtime["simulated_devices"] else runtime["num_devices"]
    ceiling_flops = ceiling["flops_per_second"] * devices
    peak = accel["peak_flops_per_second"]
    peak = peak * devices if peak else None

    variants = {}
    for name, child_runs in runs.items():
        medians = run_medians(child_runs)
        median = statistics.median(medians)
        own_samples = child_runs[0].get("samples_per_epoch", samples)
        train_flops = flops_per_sample * own_samples / median if flops_per_sample else None
        variants[name] = {
            "label": LABELS[name],
            "backend": child_runs[0]["backend"],
            # The dtype policy it ran in (the same for all: acceltrain's), and its own default, labelled beside.
            "precision": child_runs[0].get("precision"),
            "default_precision": child_runs[0].get("default_precision"),
            # Whether Keras compiled the steps with XLA, as the model said after fit (None: not a Keras fit).
            "jit_compile": child_runs[0].get("jit_compile"),
            "median_epoch_seconds": median,
            "run_medians": medians,
            "spread": spread(medians),
            # the process's CPU time (user + system, all its threads) a steady epoch, the same medians: a loaded
            # machine stretches a wall time more than this
            "cpu_run_medians": run_medians(child_runs, "epoch_cpu_seconds"),
            "samples_per_epoch": own_samples,
            "samples_per_second": own_samples / median,
            # Start-up, data, build and compile, and the first epoch: the median run's (acceltrain's warm runs: its
            # cold one, the first, is reported with the compilation cache).
            "seconds_to_first_epoch_end": statistics.median(
                r["seconds_to_first_epoch_end"] for r in (child_runs[1:] if name == "acceltrain" else []) or child_runs),
            "train_flops_per_second": train_flops,
            # of the ceiling in the compute dtype that ran (the same dtype for every variant)
            "fraction_of_ceiling": train_flops / ceiling_flops if train_flops else None,
            "fraction_of_peak": train_flops / peak if train_flops and peak else None,
            "runs": [{k: r[k] for k in ("epoch_seconds", "epoch_cpu_seconds", "threads", "seconds_to_first_epoch_end",
                                        "fit_to_first_epoch_end") if k in r}
                     for r in child_runs],
        }
        if name == "acceltrain":  # each run's ledger of its Runtime.fit: the first with a cold compilation cache
            variants[name]["ledgers"] = [r.get("ledger") for r in child_runs]
    cold, warm = runs["acceltrain"][0], runs["acceltrain"][1:]
    cache = {"cold_seconds_to_first_epoch_end": cold["seconds_to_first_epoch_end"],
             "cold_fit_to_first_epoch_end": cold["fit_to_first_epoch_end"]}
    if warm:
        cache["warm_seconds_to_first_epoch_end"] = statistics.median(r["seconds_to_first_epoch_end"] for r in warm)
        cache["warm_fit_to_first_epoch_end"] = statistics.median(r["fit_to_first_epoch_end"] for r in warm)
        cache["cut"] = 1 - cache["warm_seconds_to_first_epoch_end"] / cache["cold_seconds_to_first_epoch_end"]
    precisions = {v["precision"] for v in variants.values()}
    return {
        "recipe": config.recipe,
        "config": asdict(config),
        "batch_size": batch_size,
        "samples_per_epoch": samples,
        "flops_per_sample": flops_per_sample,
        "runtime": runtime,
        "precision": accel["precision"],
        "compute_dtype": accel["compute_dtype"],
        "one_precision": len(precisions) == 1,
        "variants": variants,
        "ceiling": {
            "label": LABELS["ceiling"],
            "dtype": ceiling["dtype"],
            "matmul_size": ceiling["matmul_size"],
            "flops_per_second_per_device": ceiling["flops_per_second"],
            "flops_per_second": ceiling_flops,
            "published_peak_flops_per_second": peak,
            "fraction_of_peak": ceiling_flops / peak if peak else None,
        },
        # each pair: the ratio of the two variants' medians, judged against the larger spread of their run medians
        "ratios": {f"{a}_over_{b}": judged(variants[a]["median_epoch_seconds"] / variants[b]["median_epoch_seconds"],
                                           (variants[a]["spread"], variants[b]["spread"]))
                   for a, b in PAIRS if a in variants and b in variants},
        # machine_load's reading: the load before the measurement began, others' work while it ran (cores' worth)
        "load_average": {"before": reading.load_before, "after": machine_load.load_average(),
                         "others": reading.others(), "cores": os.cpu_count()},
        "compilation_cache": cache,
    }


def says(judgement: dict, form: str = "{:.2f}×") -> str:
    """'1.82× (beyond this run's noise, ±4%)', '1.03× (within this run's noise, ±13%)', '0.79× (noise unknown)'."""
    ratio = form.format(judgement["ratio"])
    if judgement["noise"] is None:
        return f"{ratio} (noise unknown: one run)"
    where = "beyond" if judgement["verdict"] == "beyond noise" else "within"
    return f"{ratio} ({where} this run's noise, ±{100 * judgement['noise']:.0f}%)"


def format_table(report: dict) -> str:
    """The report as a table, for a terminal or a Markdown file (it is valid Markdown)."""
    runtime = report["runtime"]
    flops = report["flops_per_sample"]
    lines = [
        f"{report['recipe']}: acceltrain on {runtime['backend']}/{runtime['platform']}, "
        f"{runtime['num_devices']} × {runtime['device_kind']}{' (simulated)' if runtime['simulated_devices'] else ''}; "
        f"{report['samples_per_epoch']} samples an epoch at batch {report['batch_size']}; "
        f"{report['config']['epochs']} epochs × {report['config']['repeats']} runs each; "
        + (f"every variant in {report['precision']} (acceltrain's choice here; compute in {report['compute_dtype']}); "
           if report["one_precision"] else "UNLIKE PRECISIONS (see the column): the ratios compare unlike work; ")
        + (f"{flops / 1e6:.2f} MFLOP a sample (forward and backward)" if flops else "FLOP count unknown for this model")
        + ("; acceltrain checkpoints as `acceltrain train` does (auto)" if report["config"].get("checkpoints") else "")
        + ("; acceltrain with --device-data off (Keras's own input path)"
           if report["config"].get("device_data") == "off" else ""),
        "",
        "| | backend | precision (its own default) | median epoch | spread of runs | CPU an epoch | its spread "
        "| samples/s | to first epoch end | train FLOP/s | of ceiling | of peak |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in report["variants"].values():
        default = v["default_precision"] or "none: follows acceltrain's"
        cpu = v.get("cpu_run_medians") or []  # the process's CPU time a steady epoch: what load stretches least
        lines.append(
            f"| {v['label']} | {v['backend']} | {v['precision']} ({default}) | {v['median_epoch_seconds']:.3f} s | "
            f"{_percent(v['spread'])} | {f'{statistics.median(cpu):.3f} s' if cpu else 'n/a'} | "
            f"{_percent(spread(cpu)) if cpu else 'n/a'} | {v['samples_per_second']:,.0f} | "
            f"{v['seconds_to_first_epoch_end']:.1f} s | {_giga(v['train_flops_per_second'])} | "
            f"{_percent(v['fraction_of_ceiling'])} | {_percent(v['fraction_of_peak'])} |"
        )
    c = report["ceiling"]
    lines.append(f"| {c['label']} | jax | {c['dtype']}, {c['matmul_size']}³ | | | | | | | {_giga(c['flops_per_second'])} | "
                 f"100% | {_percent(c['fraction_of_peak'])} |")
    r = report["ratios"]
    lines += ["", "Median epoch ratios (each variant's median of its runs' median steady epochs; the noise is the "
                  "larger spread of the two variants' run medians): "
              + "; ".join(f"{a} / {b} {says(r[f'{a}_over_{b}'])}" for a, b in PAIRS if f"{a}_over_{b}" in r) + "."]
    cache = report["compilation_cache"]
    if "warm_seconds_to_first_epoch_end" in cache:
        lines.append(
            f"Compilation cache, acceltrain's time from process start to the end of the first epoch: "
            f"{cache['cold_seconds_to_first_epoch_end']:.1f} s cold, {cache['warm_seconds_to_first_epoch_end']:.1f} s "
            f"warm, the median of the warm runs ({100 * cache['cut']:.0f}% less; one cold run, so its noise is unknown); "
            f"from fit() start: {cache['cold_fit_to_first_epoch_end']:.2f} s cold, "
            f"{cache['warm_fit_to_first_epoch_end']:.2f} s warm."
        )
    ledgers = [run for run in report["variants"]["acceltrain"].get("ledgers") or [] if run]
    if ledgers:
        lines.append(f"acceltrain's Runtime.fit, its last run: {ledger.Ledger.from_json(ledgers[-1]).line()}.")
    lines.append(load_line(report["load_average"]))
    peak = c["published_peak_flops_per_second"]
    lines.append(f"Published peak of {runtime['device_kind']} in {c['dtype']}: "
                 + (f"{_giga(peak)}FLOP/s." if peak else "none known (see acceltrain/hardware/)."))
    return "\n".join(lines)


def load_line(load: dict) -> str:
    """The machine's load as the report's reading holds it, judged by machine_load.loaded: the rule the benchmark
    records are judged by, so a record and the bench it ran never disagree on whether the machine was quiet."""
    cores = load.get("cores") or os.cpu_count()
    others = load.get("others")
    if load.get("before") is None:
        return f"Load average: not readable on this machine ({cores} cores), so these times cannot be judged quiet."
    said = (f"Load average (1 min) on this machine: {machine_load.shown(load['before'])} before the runs began, "
            f"{machine_load.shown(load['after'])} after"
            + ("" if others is None else f"; other work kept about {others:.1f} cores busy besides these runs")
            + f"; {cores} cores")
    why = machine_load.loaded(load["before"], others, cores)
    if why is None:
        return said + f": quiet (at most {machine_load.quiet_bound(cores):g}, half the cores, before and while they ran)."
    return (said + f": {why}, above the quiet bound of {machine_load.quiet_bound(cores):g}, so these times are "
            "indicative only; rerun on a quiet machine.")


def _giga(value) -> str:
    if value is None:
        return "n/a"
    return f"{value / 1e12:.1f} T" if value >= 1e12 else f"{value / 1e9:.1f} G"


def _percent(value) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.1f}%" if 0 < value < 0.01 else f"{100 * value:.0f}%"


# --- Children ---------------------------------------------------------------------------------

def _run_child(variant: str, config: BenchConfig, batch_size: int, cache_dir: str, extra: dict) -> dict:
    """Run one variant in a fresh Python and return its result; time counts from just before the start."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for name in ("KERAS_BACKEND", "JAX_COMPILATION_CACHE_DIR"):  # JAX reads the cache folder from the env
        env.pop(name, None)
    if variant == "plain":
        env["KERAS_BACKEND"] = "tensorflow" if _importable("tensorflow") else "jax"
    elif variant in ("hand", "ceiling"):
        env["KERAS_BACKEND"] = "jax"
    else:  # acceltrain's: Runtime.fit, or the script under acceltrain run
        env["JAX_COMPILATION_CACHE_DIR"] = cache_dir  # acceltrain's own: empty on its first run, filled after
        if config.backend:
            env["KERAS_BACKEND"] = config.backend
    payload = json.dumps({**asdict(config), "batch_size": batch_size, "started": time.time(), **extra})
    with tempfile.TemporaryDirectory(prefix="acceltrain-bench-script-") as folder:
        command = [sys.executable, "-m", "acceltrain.commands.bench", variant, payload]
        if variant == "script":
            script = os.path.join(folder, "train.py")
            with open(script, "w") as file:
                file.write(SCRIPT)
            env[PAYLOAD_ENV] = payload
            devices = ["--simulate-devices", str(config.simulate_devices)] if config.simulate_devices else []
            command = [sys.executable, "-m", "acceltrain", "run", *devices, script]
        child = subprocess.run(command, capture_output=True, text=True, env=env)
    for line in reversed(child.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    raise AcceltrainError(f"bench: {LABELS[variant]} failed (exit {child.returncode}). Its last output:\n"
                          + "\n".join((child.stdout + child.stderr).strip().splitlines()[-20:]))


# (e): what a user writes, run by `acceltrain run`; its own data and model from the recipe, as (a)'s are. Its last
# line is the child's result.
SCRIPT = '''"""The recipe as a plain Keras script: compile, then fit on NumPy arrays (acceltrain bench's (e))."""
import json
import os

import keras

from acceltrain.commands import bench
from acceltrain.training.callbacks import EpochTimer

config = json.loads(os.environ[bench.PAYLOAD_ENV])
recipe, x, y = bench._inputs(config)
keras.utils.set_random_seed(config["seed"])
model = recipe.build_model(total_steps=config["epochs"] * -(-len(x) // config["batch_size"]))
timer = EpochTimer()
model.fit(x, y, batch_size=config["batch_size"], epochs=config["epochs"], verbose=0, callbacks=[timer])
print(bench.RESULT_TAG + json.dumps(bench._timing(
    timer, config["started"], backend=keras.backend.backend(), samples_per_epoch=len(x),
    jit_compile=bool(model.jit_compile), precision=model.dtype_policy.name,
    default_precision=model.dtype_policy.name)), flush=True)
'''


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _child_main(variant: str, payload: str) -> None:
    config = json.loads(payload)
    result = {"plain": _plain, "acceltrain": _acceltrain, "hand": _hand, "ceiling": _ceiling}[variant](config)
    print(RESULT_TAG + json.dumps(result), flush=True)


def _inputs(config):
    from acceltrain import datasets, recipes

    recipe = recipes.get(config["recipe"])
    splits = datasets.load_npz()
    x, y = recipe.preprocess(splits.x_train, splits.y_train)
    if config["samples"]:
        x, y = x[: config["samples"]], y[: config["samples"]]
    return recipe, x, y


def _timing(timer, started: float, **extra) -> dict:
    """The epochs' times of an EpochTimer (absolute, comparable with `started` in the parent process)."""
    first_end = timer.epoch_ends[0]
    return {"epoch_seconds": timer.epoch_seconds, "epoch_cpu_seconds": timer.epoch_cpu_seconds,
            "threads": timer.threads, "seconds_to_first_epoch_end": first_end - started,
            "fit_to_first_epoch_end": first_end - timer.fit_start, **extra}


def _plain(config) -> dict:
    """(a) What a plain Keras user writes: build, compile, model.fit with the defaults; in acceltrain's precision
    when the parent passes it (Keras's own default policy is recorded beside it)."""
    import keras

    from acceltrain.training.callbacks import EpochTimer

    recipe, x, y = _inputs(config)
    keras.utils.set_random_seed(config["seed"])
    default = keras.config.dtype_policy().name
    if config.get("precision"):
        keras.config.set_dtype_policy(config["precision"])
    model = recipe.build_model()
    timer = EpochTimer()
    model.fit(x, y, batch_size=config["batch_size"], epochs=config["epochs"], verbose=0, callbacks=[timer])
    return _timing(timer, config["started"], backend=keras.backend.backend(), samples_per_epoch=len(x),
                   jit_compile=bool(model.jit_compile), precision=model.dtype_policy.name, default_precision=default)


def _acceltrain(config) -> dict:
    """(b) The library's path: connect → scope → Runtime.fit (checkpointing as `acceltrain train` does if asked)."""
    from acceltrain import hardware
    from acceltrain.runtime import Settings

    # connect()'s keywords read by name from bench's config (backend, simulate_devices, device_data), as `acceltrain
    # train` reads its flags: one Settings, the same connect.
    runtime = Settings.read(types.SimpleNamespace(**config)).connect(verbose=False)
    recipe, x, y = _inputs(config)
    runtime.seed(config["seed"])
    steps_per_epoch = math.ceil(len(x) / config["batch_size"])
    with runtime.scope():
        model = recipe.build_model(total_steps=config["epochs"] * steps_per_epoch)
    from acceltrain.training.callbacks import EpochTimer

    timer = EpochTimer()
    with tempfile.TemporaryDirectory(prefix="acceltrain-bench-checkpoints-") as folder:
        # With checkpoints, as `acceltrain train` runs it: their cost counts in the epoch they end.
        history = runtime.fit(model, x, y, batch_size=config["batch_size"], epochs=config["epochs"], verbose=0,
                              callbacks=[timer], checkpoint_dir=folder if config["checkpoints"] else None)
    compute_dtype = model.dtype_policy.compute_dtype
    return _timing(
        timer, config["started"],
        backend=runtime.backend,
        samples_per_epoch=len(x),
        jit_compile=bool(model.jit_compile),
        runtime=runtime.describe(),
        precision=model.dtype_policy.name,
        default_precision=model.dtype_policy.name,  # bench runs acceltrain as it chooses by default
        compute_dtype=compute_dtype,
        flops_per_sample=training_flops_per_sample(model),
        peak_flops_per_second=hardware.kind(runtime.platform).peak_flops_per_second(runtime.device_kind, compute_dtype),
        ledger=history.ledger.as_json() if history.ledger else None,  # where the fit's time went (acceltrain/ledger.py)
    )


def _hand(config) -> dict:
    """(c) The floor: the same model, initial weights and RMSprop, in a jitted JAX loop written by hand.

    The data go to the device once; each epoch is one compiled call (a `lax.scan` over its steps) that
    shuffles on the device. Computes in the same dtype as acceltrain (weights kept in float32).
    """
    import jax
    import jax.numpy as jnp

    from acceltrain.backends import jax as jax_backend
    from acceltrain.training.callbacks import EpochTimer

    recipe, x, y = _inputs(config)
    jax_backend.set_seed(config["seed"])  # keras.utils.set_random_seed would import TensorFlow too
    model = recipe.build_model()
    layers = _dense_stack(model)
    compute = jnp.dtype(config["compute_dtype"])
    rate, rho, epsilon = float(recipe.PEAK_LEARNING_RATE), 0.9, 1e-7  # Keras's RMSprop defaults
    batch = config["batch_size"]
    steps = len(x) // batch

    timer = EpochTimer()
    timer.on_train_begin()  # its wall and CPU clocks start here, as a fit's do
    params = [(jnp.asarray(kernel), jnp.asarray(bias)) for kernel, bias, _ in layers]
    velocities = jax.tree_util.tree_map(jnp.zeros_like, params)
    x_device, y_device = jax.device_put(x), jax.device_put(y)

    def loss_fn(params, xb, yb):
        h = xb.astype(compute)
        for i, (kernel, bias) in enumerate(params):
            h = h @ kernel.astype(compute) + bias.astype(compute)
            if i < len(params) - 1:
                h = jax.nn.relu(h)
        log_probabilities = jax.nn.log_softmax(h.astype(jnp.float32))  # softmax + cross-entropy, in float32
        loss = -jnp.mean(jnp.take_along_axis(log_probabilities, yb[:, None], axis=1))
        return loss, jnp.mean(jnp.argmax(h, axis=1) == yb)

    def step(carry, indices):
        params, velocities = carry
        (loss, accuracy), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x_device[indices], y_device[indices])
        velocities = jax.tree_util.tree_map(lambda v, g: rho * v + (1 - rho) * g * g, velocities, grads)
        params = jax.tree_util.tree_map(lambda p, g, v: p - rate * g / jnp.sqrt(v + epsilon), params, grads, velocities)
        return (params, velocities), (loss, accuracy)

    @jax.jit
    def epoch(params, velocities, key):
        order = jax.random.permutation(key, len(x))[: steps * batch].reshape(steps, batch)
        (params, velocities), (losses, accuracies) = jax.lax.scan(step, (params, velocities), order)
        return params, velocities, losses.mean(), accuracies.mean()

    key = jax.random.key(config["seed"])
    for number in range(config["epochs"]):
        key, epoch_key = jax.random.split(key)
        params, velocities, loss, accuracy = epoch(params, velocities, epoch_key)
        float(loss)  # wait for the epoch, as Keras does for its epoch-end logs
        timer.on_epoch_end(number)
    # weights in float32, computing in the compute dtype: acceltrain's policy, written out (no default of its own)
    return _timing(timer, config["started"], backend="jax", samples_per_epoch=steps * batch, final_loss=float(loss),
                   final_accuracy=float(accuracy), precision=config.get("precision"), default_precision=None)


def _dense_stack(model):
    """[(kernel, bias, activation)] of a model made of Dense layers only; the hand loop handles no other."""
    import keras

    stack = []
    for layer in model.layers:
        if not isinstance(layer, keras.layers.Dense):
            raise UsageError(f"The hand-written loop of bench handles models of Dense layers only; "
                             f"{model.name!r} has a {type(layer).__name__} layer ({layer.name!r}).")
        stack.append((keras.ops.convert_to_numpy(layer.kernel), keras.ops.convert_to_numpy(layer.bias),
                      layer.activation.__name__))
    return stack


def _ceiling(config) -> dict:
    """(d) The best of repeated square matmuls, in the model's compute dtype, on one device."""
    import jax
    import jax.numpy as jnp

    from acceltrain import hardware

    size = hardware.kind(config["platform"]).MATMUL_SIZE
    dtype = jnp.dtype(config["compute_dtype"])
    device = jax.devices(config["platform"])[0]
    a, b = (jax.device_put(jax.random.normal(jax.random.key(i), (size, size), dtype), device) for i in (1, 2))
    matmul = jax.jit(jnp.matmul)
    matmul(a, b).block_until_ready()  # compile
    best = math.inf
    for _ in range(10):
        start = time.perf_counter()
        matmul(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return {"dtype": str(dtype), "matmul_size": size, "flops_per_second": 2 * size**3 / best}


def training_flops_per_sample(model) -> float | None:
    """Analytic FLOPs of one training step per sample: forward and backward through the matmuls.

    A Dense layer of an (n_in × n_out) kernel costs 2·n_in·n_out forward, as much for its kernel's
    gradient, and as much again for its input's gradient, except the first layer whose input needs
    none. Elementwise work is left out (small beside the matmuls). None for a model with weighted
    layers other than Dense on a flat input, rather than a wrong count.
    """
    import keras

    total, first = 0.0, True
    for layer in model.layers:
        if not layer.weights:
            continue
        if not isinstance(layer, keras.layers.Dense) or len(layer.kernel.shape) != 2 or len(layer.input.shape) != 2:
            return None
        n_in, n_out = layer.kernel.shape
        total += 2 * n_in * n_out * (2 if first else 3)
        first = False
    return total or None


if __name__ == "__main__":
    _child_main(sys.argv[1], sys.argv[2])
