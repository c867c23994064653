"""What do simulated CPU devices cost per step, and what do acceltrain's rules for them cost?

    python benchmarks/simulated_devices.py [--devices 1 2 4 8] [--rounds 5] [--models mlp seed convnet]
        [--sections rules floor run op_by_op] [--run-epochs 2] [--quick]
    python benchmarks/simulated_devices.py --sections stress --devices 8 --stress-runs 20

Small batches and many steps (batch 32) on N simulated CPU devices (XLA_FLAGS
--xla_force_host_platform_device_count=N), keras.distribution.DataParallel over all of them. Sections:

- rules: each (model, N, rule) is one fresh process holding two copies of the model, one with no distribution
  (plain Keras on one device, as a plain script) and one over all N devices under the rule; their epochs alternate, so
  the machine's load falls on both alike, and the ratio of their epoch times is what N devices cost under that
  rule. `keras`: plain Keras, `fit(verbose=0)` with no callbacks, so Keras dispatches steps without waiting
  (several in flight; on several CPU devices this is what can deadlock: XLA aborts, exit 134); `one_step`:
  acceltrain's rule (backends/jax/steps.py::_steps_must_not_overlap), a batch-end callback that is not `async_safe`,
  so Keras waits for each step's metrics; `in_flight_K`: at most K steps dispatched and not finished (public
  callback API only).
- floor: as many parameters in a hand-written jitted JAX step (no Keras, a host sync every 4 steps), on N
  devices against 1: what no rule of Keras's loop can beat.
- run: `acceltrain run --simulate-devices N tests/scripts/long_batch32.py` (1,500 steps of batch 32 an epoch),
  its steady epoch against `--simulate-devices 1`, runs alternating.
- op_by_op: a model Keras runs op by op (in-model RandomCrop) under each treatment, against one device.
- stress (not by default): short runs of every rule and treatment back to back on the most devices, counted.

Records the section "simulated-devices" (benchmarks/results/simulated-devices.json). Not a test: the figures
are what this machine did in this run, with the load average it saw. A deadlock is reported by XLA after 20 s
here (its default is 40 s). --quick: the mlp alone on 1 and 2 devices, 1 round, the rules and op_by_op sections.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _noise, _results  # noqa: E402

SECTION = "simulated-devices"
REPO = _results.REPO
LONG_SCRIPT = REPO / "tests" / "scripts" / "long_batch32.py"
BATCH = 32
MODELS = {  # name -> (what it is, steps an epoch in the rule comparison)
    "mlp": ("functional residual MLP, 64 -> 128 -> 128 (+ skip) -> 10, 26 k parameters, Adam", 300),
    "seed": ("the seed's MLP, 784-512-256-128-64-10, 575 k parameters, RMSprop", 100),
    "convnet": ("small convnet (two Conv2D 3x3, 16 and 32 filters), 28x28x1, 8 k parameters, Adam", 100),
}
RULES = ("keras", "one_step", "in_flight_2", "in_flight_4")
SECTIONS = ("rules", "floor", "run", "op_by_op", "stress")
OP_BY_OP = ("compiled", "one_device", "op_by_op", "op_by_op_async")


def child_env(devices: int) -> dict:
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH")) if p)}
    # A deadlock is reported by XLA after 40 s by default; 20 s is still 20x the slowest step here.
    env["XLA_FLAGS"] = (f"--xla_force_host_platform_device_count={devices} "
                        "--xla_cpu_collective_call_terminate_timeout_seconds=20")
    return env


def in_child(args: list[str], devices: int, timeout: float) -> dict:
    """One measurement in a fresh process: its JSON line, or how it failed."""
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, __file__, "--child", *args], env=child_env(devices),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"outcome": "hung", "seconds_waited": round(time.perf_counter() - started, 1)}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        deadlock = "Termination timeout" in done.stderr
        return {"outcome": "deadlocked" if deadlock else f"exit {done.returncode}", "stderr_tail": done.stderr[-1500:]}
    return {"outcome": "finished", **json.loads(lines[-1])}


# --- In the child process -------------------------------------------------------------------------------


def build(name: str):
    import keras

    layers = keras.layers
    if name == "mlp":
        inputs = keras.Input(shape=(64,))
        hidden = layers.Dense(128, activation="relu")(inputs)
        hidden = layers.Add()([hidden, layers.Dense(128, activation="relu")(hidden)])
        model = keras.Model(inputs, layers.Dense(10, activation="softmax")(hidden))
        return model, "adam", (64,)
    if name == "seed":
        model = keras.Sequential([keras.Input(shape=(784,))]
                                 + [layers.Dense(units, activation="relu") for units in (512, 256, 128, 64)]
                                 + [layers.Dense(10, activation="softmax")])
        return model, "rmsprop", (784,)
    model = keras.Sequential([keras.Input(shape=(28, 28, 1)),
                              layers.Conv2D(16, 3, activation="relu"), layers.MaxPooling2D(2),
                              layers.Conv2D(32, 3, activation="relu"), layers.MaxPooling2D(2),
                              layers.Flatten(), layers.Dropout(0.5), layers.Dense(10, activation="softmax")])
    return model, "adam", (28, 28, 1)


def rule_callbacks(rule: str) -> list:
    import threading

    import keras

    class OneStep(keras.callbacks.Callback):  # as training/callbacks.py::OneStepAtATime
        def on_train_batch_end(self, batch, logs=None):
            pass

    class InFlight(keras.callbacks.Callback):
        """Step t+K is not dispatched before step t's metrics reached the host (Keras's callback thread)."""

        async_safe = True

        def __init__(self, k):
            super().__init__()
            self.k, self.done, self.changed = k, -1, threading.Condition()

        def on_epoch_begin(self, epoch, logs=None):
            self.done = -1

        def on_train_batch_end(self, batch, logs=None):
            with self.changed:
                self.done = max(self.done, batch)
                self.changed.notify_all()

        def on_train_batch_begin(self, batch, logs=None):
            with self.changed:
                self.changed.wait_for(lambda: self.done >= batch - self.k)

    if rule == "keras":
        return []
    if rule == "one_step":
        return [OneStep()]
    return [InFlight(int(rule.rsplit("_", 1)[1]))]


def child_rule(model_name: str, rule: str, steps: int, rounds: int) -> dict:
    """Alternate epochs of the model on one device and on all devices, under `rule`: steps/s of each."""
    import jax
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    every = keras.distribution.DataParallel(devices=[f"cpu:{d.id}" for d in jax.devices()])
    placed = {}
    for label, scope in (("one", contextlib.nullcontext), ("all", every.scope)):  # one: no distribution, as plainly
        with scope():
            model, optimizer, shape = build(model_name)
            model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        placed[label] = (model, scope)
    x = np.random.default_rng(0).random((steps * BATCH, *shape), dtype=np.float32)
    y = np.random.default_rng(1).integers(0, 10, steps * BATCH)

    def epoch(label):
        model, scope = placed[label]
        callbacks = rule_callbacks(rule if label == "all" else "keras")  # 1 device: the plain script
        return scope(), lambda: model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=callbacks)

    return _one_against_all(epoch, steps, rounds)


def _one_against_all(epoch, steps: int, rounds: int) -> dict:
    """Epochs alternating between one device and all, `epoch(label)` ("one" or "all") giving a context to enter and
    the fit to time inside it: rounds 0 and 1 compile (a step may compile again once its inputs are placed), the
    next `rounds` are timed. Steps/s of each, the median over the rounds, and their ratio."""
    seconds = {"one": [], "all": []}
    for round_ in range(rounds + 2):
        for label in seconds:
            context, fit = epoch(label)
            with context:
                started = time.perf_counter()
                fit()
                if round_ > 1:
                    seconds[label].append(time.perf_counter() - started)
    one, all_ = statistics.median(seconds["one"]), statistics.median(seconds["all"])
    return {"steps_per_s_one_device": steps / one, "steps_per_s": steps / all_, "ratio": one / all_,
            "seconds": seconds, "load": os.getloadavg()[0]}


def child_floor(params: int, steps: int) -> dict:
    """A hand-written jitted step with `params` replicated parameters and a batch split over every device."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    def steps_per_s(devices) -> float:
        mesh = Mesh(np.array(devices), ("batch",))
        replicated, split = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("batch"))
        w = jax.device_put(np.full((params // 64, 64), 0.01, np.float32), replicated)

        def step(w, x):
            loss, grad = jax.value_and_grad(lambda w: jnp.mean(jnp.tanh(x @ w.T) ** 2))(w)
            return w - 0.01 * grad, loss

        step = jax.jit(step, donate_argnums=0, out_shardings=(replicated, replicated))
        batches = [np.random.default_rng(i).random((BATCH, 64), dtype=np.float32) for i in range(8)]
        for i in range(steps + 20):
            if i == 20:
                jax.block_until_ready(w)
                started = time.perf_counter()
            w, loss = step(w, jax.device_put(batches[i % 8], split))
            if i % 4 == 3:  # at most 4 steps in flight: unbounded dispatch deadlocks here too
                loss.block_until_ready()
        jax.block_until_ready(w)
        return steps / (time.perf_counter() - started)

    one, all_ = [], []
    for _ in range(3):
        one.append(steps_per_s(jax.devices()[:1]))
        all_.append(steps_per_s(jax.devices()))
    return {"steps_per_s_one_device": statistics.median(one), "steps_per_s": statistics.median(all_),
            "ratio": statistics.median(all_) / statistics.median(one), "load": os.getloadavg()[0]}


def child_op_by_op(treatment: str, steps: int, rounds: int) -> dict:
    """A convnet holding RandomCrop (Keras runs its step op by op) with no distribution, op by op, against the
    same model on every device under `treatment`, epochs alternating: steps/s of each.

    "compiled": acceltrain's treatment of it (backends/jax/op_by_op.py::op_by_op_made_safe compiles the step);
    "one_device": acceltrain's treatment of the same model compiled with run_eagerly=True (the call on one
    device); "op_by_op": plain Keras, distributed, one step at a time (can deadlock); "op_by_op_async": plain
    Keras, distributed, steps dispatched without waiting (can deadlock)."""
    import jax
    import keras
    import numpy as np

    from acceltrain.backends import jax as backend

    def build(run_eagerly: bool):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.RandomCrop(28, 28),
                                  keras.layers.Conv2D(16, 3, activation="relu"), keras.layers.MaxPooling2D(2),
                                  keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.GlobalAveragePooling2D(),
                                  keras.layers.Dense(10, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"], run_eagerly=run_eagerly)
        return model

    every = keras.distribution.DataParallel(devices=[f"cpu:{d.id}" for d in jax.devices()])
    reference = build(False)  # no distribution, as plainly
    with every.scope():
        model = build(treatment == "one_device")
    x = np.random.default_rng(0).random((steps * BATCH, 32, 32, 3), dtype=np.float32)
    y = np.random.default_rng(1).integers(0, 10, steps * BATCH)

    def epoch(label):
        copy = reference if label == "one" else model
        callbacks = rule_callbacks("keras" if label == "one" or treatment == "op_by_op_async" else "one_step")
        context = contextlib.ExitStack()
        if label == "all":
            context.enter_context(every.scope())
            if treatment in ("compiled", "one_device"):
                context.enter_context(backend.op_by_op_made_safe(copy, every))
        return context, lambda: copy.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=callbacks)

    return _one_against_all(epoch, steps, rounds)


# --- acceltrain run on a long batch-32 script ----------------------------------------------------------------


def run_epoch_seconds(devices: int, epochs: int, timeout: float) -> dict:
    """`acceltrain run --simulate-devices N` on the long script: its steady epochs' seconds (the script prints them)."""
    env = child_env(1)
    env.pop("XLA_FLAGS")
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "acceltrain", "run", "--simulate-devices", str(devices),
                               str(LONG_SCRIPT), "--epochs", str(epochs)], env=env, capture_output=True, text=True,
                              timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"outcome": "hung", "seconds": time.perf_counter() - started}
    epochs_s = [float(line.split()[-1]) for line in done.stdout.splitlines() if line.startswith("epoch seconds:")]
    if done.returncode != 0 or not epochs_s:
        return {"outcome": f"exit {done.returncode}", "stderr": done.stderr[-1500:]}
    return {"outcome": "finished", "epoch_seconds": epochs_s, "load": os.getloadavg()[0]}



# --- The parent: measure, then record --------------------------------------------------------------------


def measure(args) -> dict:
    raw = {"batch": BATCH, "devices": args.devices, "models": args.models, "rounds": args.rounds,
           "sections": args.sections, "loads": [], **{section: {} for section in SECTIONS}}
    several = [d for d in args.devices if d > 1]

    def note(section, key, result):
        print(section, key, {k: v for k, v in result.items() if k not in ("seconds", "stderr_tail")},
              file=sys.stderr, flush=True)

    if "rules" in args.sections:
        for model in args.models:
            for devices in several:
                for rule in RULES:
                    raw["loads"].append(_results.load_average())
                    steps = MODELS[model][1] // (10 if args.quick else 1)
                    result = in_child(["rule", model, rule, str(steps), str(args.rounds)], devices, 900)
                    raw["rules"].setdefault(model, {}).setdefault(str(devices), {})[rule] = result
                    note("rules", (model, devices, rule), result)
    if "floor" in args.sections:
        for params in (26_000, 575_000):
            for devices in several:
                result = in_child(["floor", str(params), "300" if params < 100_000 else "100"], devices, 900)
                raw["floor"].setdefault(str(params), {})[str(devices)] = result
                note("floor", (params, devices), result)
    if "run" in args.sections:
        for _ in range(2):  # alternating: 1 device, then each count
            for devices in args.devices:
                raw["loads"].append(_results.load_average())
                result = run_epoch_seconds(devices, args.run_epochs, timeout=1800)
                raw["run"].setdefault(str(devices), []).append(result)
                note("run", devices, result)
    if "op_by_op" in args.sections:
        for devices in several:
            for treatment in OP_BY_OP:
                raw["loads"].append(_results.load_average())
                result = in_child(["op_by_op", treatment, "5" if args.quick else "20", str(args.rounds)], devices, 900)
                raw["op_by_op"].setdefault(str(devices), {})[treatment] = result
                note("op_by_op", (devices, treatment), result)
    if "stress" in args.sections:  # how often each rule finishes on the most devices, short runs back to back
        devices = max(args.devices)
        for run in range(args.stress_runs):
            for model in ("mlp", "convnet"):
                for rule in args.stress_rules:
                    raw["loads"].append(_results.load_average())
                    result = in_child(["rule", model, rule, "50", "1"], devices, 600)
                    raw["stress"].setdefault(f"{model} on {devices}", {}).setdefault(rule, []).append(
                        result["outcome"])
                    note("stress", (run, model, rule), result)
            for treatment in args.stress_treatments:
                result = in_child(["op_by_op", treatment, "10", "1"], devices, 600)
                raw["stress"].setdefault(f"RandomCrop convnet on {devices}", {}).setdefault(treatment, []).append(
                    result["outcome"])
                note("stress", (run, "crop", treatment), result)
    return raw


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, rest = sys.argv[2], sys.argv[3:]
        if kind == "rule":
            result = child_rule(rest[0], rest[1], int(rest[2]), int(rest[3]))
        elif kind == "op_by_op":
            result = child_op_by_op(rest[0], int(rest[1]), int(rest[2]))
        else:
            result = child_floor(int(rest[0]), int(rest[1]))
        print(json.dumps(result))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--rounds", type=int, default=5, help="alternations of the two copies after the warm-up")
    parser.add_argument("--run-epochs", type=int, default=2, help="epochs of the long script under run")
    parser.add_argument("--sections", nargs="+", default=[s for s in SECTIONS if s != "stress"], choices=SECTIONS)
    parser.add_argument("--stress-runs", type=int, default=20, help="runs of each rule in the stress section")
    parser.add_argument("--stress-rules", nargs="+", default=list(RULES), choices=RULES)
    parser.add_argument("--stress-treatments", nargs="+", default=["compiled", "op_by_op"], choices=OP_BY_OP)
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    if args.quick:
        args.devices, args.models, args.rounds, args.sections = [1, 2], ["mlp"], 1, ["rules", "op_by_op"]
    run.save(SECTION, measure(args))


# --- Rendering ----------------------------------------------------------------------------------------------


def _timed(result) -> dict:
    """A rules or op_by_op measurement: how it ended, and where it finished its time per step on N devices over one
    device's, judged by the noise rule (the epochs of each copy, alternating)."""
    if result["outcome"] != "finished":
        return {"outcome": result["outcome"]}
    seconds = result["seconds"]
    difference = _noise.compare(seconds["one"], seconds["all"])
    return {"outcome": "finished", "steps_per_s": result["steps_per_s"],
            "one_device_steps_per_s": result["steps_per_s_one_device"], "times": difference.ratio,
            "says": difference.says("{:.1f}x"), "shown": difference.shown}


def _steady(runs) -> list[float]:
    """The fastest epoch after the first (compilation) of each finished run."""
    return [min(r["epoch_seconds"][1:] or r["epoch_seconds"]) for r in runs if r["outcome"] == "finished"]


def summarize(raw: dict) -> dict:
    rules = {model: {devices: {rule: _timed(result) for rule, result in by_rule.items()}
                     for devices, by_rule in by_devices.items()} for model, by_devices in raw["rules"].items()}
    floor = {params: {devices: (1 / result["ratio"]) if result["outcome"] == "finished" else result["outcome"]
                      for devices, result in by_devices.items()} for params, by_devices in raw["floor"].items()}
    one = _steady(raw["run"].get("1", []))
    run = {}
    for devices, runs in raw["run"].items():
        steady = _steady(runs)
        run[devices] = {"steady": steady, "failed": [r["outcome"] for r in runs if r["outcome"] != "finished"],
                        "times": statistics.median(steady) / statistics.median(one) if steady and one else None}
    op_by_op = {devices: {treatment: _timed(result) for treatment, result in by.items()}
                for devices, by in raw["op_by_op"].items()}
    stress = {job: {rule: {"finished": outcomes.count("finished"), "runs": len(outcomes),
                           "failed": sorted(o for o in outcomes if o != "finished")} for rule, outcomes in by.items()}
              for job, by in raw["stress"].items()}
    loads = [load for load in raw["loads"] if load is not None]
    return {"batch": raw["batch"], "models": raw["models"], "rules": rules, "floor": floor, "run": run,
            "op_by_op": op_by_op, "stress": stress, "loads": [min(loads), max(loads)] if loads else []}


def _times(times) -> str:
    return f"{times:.2f}x" if times else "–"


def _cell(found) -> str:
    if not found:
        return "–"
    if "times" not in found:
        return found["outcome"]
    return f"{found['steps_per_s']:.0f} ({found['says']})"


def render(summary: dict, record: dict) -> str:
    parts = [f"""## Simulated devices: what each costs per step, what one step at a time adds, and a step Keras runs op by op

`{record['command']}`. Batch {summary['batch']}, DataParallel over N simulated CPU devices, the runs started at
{_results.load_range(summary['loads'], record['machine'].get('cores'))}. Each figure in brackets is a time per step on N
devices over one device's, measured side by side in one process (epochs alternating) and judged against that
run's noise (benchmarks/_noise.py)."""]
    if summary["rules"]:
        rows = []
        for model, by_devices in summary["rules"].items():
            for devices, by_rule in by_devices.items():
                one = [found["one_device_steps_per_s"] for found in by_rule.values() if "times" in found]
                rows.append(f"| {model} | {devices} | {statistics.median(one):.0f} | " if one else
                            f"| {model} | {devices} | – | ")
                rows[-1] += " | ".join(_cell(by_rule.get(rule)) for rule in RULES) + " |"
        models = "; ".join(f"{name}: {MODELS[name][0]}" for name in summary["rules"])
        parts.append(f"""Steps/s on N devices under each rule and, in brackets, the time per step against plain Keras on one
device. `keras`: plain Keras, steps dispatched without waiting; `one_step`: acceltrain's rule, Keras waits for each
step's metrics; `in_flight_K`: at most K steps in flight. "deadlocked": XLA's collective rendezvous timed out.
Models: {models}.

| model | N | plain Keras on 1 device, steps/s | {' | '.join(RULES)} |
|---|---|---|{'---|' * len(RULES)}
{chr(10).join(rows)}""")
    if summary["floor"]:
        rows = [f"| {int(params):,} | {devices} | "
                f"{f'{times:.1f}x' if isinstance(times, float) else times} |"
                for params, by_devices in summary["floor"].items() for devices, times in by_devices.items()]
        parts.append(f"""The floor: a hand-written jitted JAX step holding that many replicated parameters, the batch split
over N devices, no Keras, a host sync every 4 steps: its time per step on N devices over 1 device's. Every device
keeps and updates its own copy of the weights and all-reduces their gradient, on the machine's
{record['machine'].get('cores', '?')} cores: no rule of Keras's loop can beat it.

| parameters | N | time per step against 1 device |
|---|---|---|
{chr(10).join(rows)}""")
    if summary["run"]:
        rows = [f"| {devices} | {', '.join(f'{s:.1f}' for s in found['steady']) or '–'} | {_times(found['times'])} | "
                f"{', '.join(found['failed']) or 'none'} |" for devices, found in summary["run"].items()]
        parts.append(f"""`acceltrain run --simulate-devices N tests/scripts/long_batch32.py` (a functional residual MLP, 1,500
steps of batch 32 an epoch): each run's steady epoch, runs alternating, and the median against 1 device.

| N | steady epoch seconds | time against 1 device | failed runs |
|---|---|---|---|
{chr(10).join(rows)}""")
    if summary["op_by_op"]:
        rows = [f"| {devices} | " + " | ".join(_cell(by.get(t)) for t in OP_BY_OP) + " |"
                for devices, by in summary["op_by_op"].items()]
        parts.append(f"""A model Keras runs op by op (in-model RandomCrop, a convnet on 32x32x3): steps/s on N devices and, in
brackets, the time per step against plain Keras on one device, op by op, in the same process. `compiled`:
acceltrain's treatment (JAX compiles RandomCrop); `one_device`: acceltrain's treatment of the same model compiled
with run_eagerly=True (the call on one device); `op_by_op`: distributed as Keras runs it, one step at a time;
`op_by_op_async`: the same, plain Keras.

| N | {' | '.join(OP_BY_OP)} |
|---|{'---|' * len(OP_BY_OP)}
{chr(10).join(rows)}""")
    if summary["stress"]:
        rows = [f"| {job} | {rule} | {found['finished']}/{found['runs']} | {', '.join(found['failed']) or 'none'} |"
                for job, by in summary["stress"].items() for rule, found in by.items()]
        parts.append(f"""Short runs back to back (fresh processes), counting how many finished.

| job | rule | finished | failures |
|---|---|---|---|
{chr(10).join(rows)}""")
    return "\n\n".join(parts)


def quotes(summary: dict, record: dict) -> dict:
    """`op-by-op`: the RandomCrop model's treatments at the most devices measured; `run`: the long batch-32 script
    under `acceltrain run` at each device count; `one-step`: what one step at a time costs against plain Keras."""
    said = {}
    if summary["op_by_op"]:
        devices = max(summary["op_by_op"], key=int)
        found = summary["op_by_op"][devices]
        words = {"compiled": "compiled by acceltrain", "one_device": "on one device (run_eagerly=True)",
                 "op_by_op": "distributed op by op, one step at a time", "op_by_op_async": "distributed op by op as "
                 "plain Keras runs it"}
        parts = [f"{words[t]} {found[t]['says'] if 'times' in found[t] else found[t]['outcome']}"
                 for t in OP_BY_OP if t in found]
        said["op-by-op"] = (f"A convnet with RandomCrop inside, batch {summary['batch']}, on {devices} simulated devices: "
                            f"its time per step against plain Keras op by op on one device was {'; '.join(parts)} "
                            f"({_results.cite(record)}).")
    one = summary["run"].get("1")
    if one and one["steady"]:
        parts = [f"{found['times']:.1f}x at {devices} devices" for devices, found in summary["run"].items()
                 if devices != "1" and found["times"]]
        said["run"] = (f"`acceltrain run` on a script of 1,500 steps of batch 32 an epoch took {', '.join(parts)} "
                       f"the time of one device per steady epoch ({_results.cite(record)}).")
    steps = [(model, devices, by["one_step"]) for model, by_devices in summary["rules"].items()
             for devices, by in by_devices.items() if "times" in by.get("one_step", {})]
    if steps:
        said["one-step"] = ("Under one step at a time, a step on N simulated devices took, against the same step on "
                            "one device: " + "; ".join(f"{model} at {devices}: {found['says']}"
                                                       for model, devices, found in steps)
                            + f" ({_results.cite(record)}).")
    return said


if __name__ == "__main__":
    main()
