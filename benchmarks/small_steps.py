"""What does a small training step cost under `acceltrain run` and `launch`, against a hand-written jitted step on
the same devices (the floor)?

    python benchmarks/small_steps.py [--rounds 2] [--models mlp] [--quick]
    python benchmarks/small_steps.py --models lstm --section small-steps-lstm
    python benchmarks/small_steps.py --models bilstm --places launch --section small-steps-bilstm

Batch 32, benchmarks/small_steps_script.py: a subclassed MLP (32 -> 64 -> 10), an LSTM (64 units over 40 steps
of 16 features) and issue 45's IMDB-shaped text classifier (bilstm: an Embedding of 80 tokens, then two
bidirectional LSTMs of 32 units), Adam. Each run is a fresh process and times the second of two epochs, per step:
- plain: `python small_steps_script.py` (plain Keras, one device);
- run N: `acceltrain run --simulate-devices N` (N = 1, 4, 8), floor N: the hand-written step (Keras's
  `stateless_call` + `optimizer.stateless_apply`, jitted over a mesh of the N devices, the batch split over them,
  a host sync every step as Keras's fit makes on several CPU devices) with N simulated devices (the MLP's floor
  trains its weights since 74a45f9: before, built with build((None, 32)), the subclassed MLP had none, and its step
  learned nothing at about half a real step's cost; records of the MLP older than that hold that floor);
- launch: `acceltrain launch --processes 2 --simulate-devices 2`, floor launch: the hand-written step in the same
  2-process job (acceltrain starts jax.distributed; a loop without fit runs as written), process 0's figure;
- keras N / keras launch: plain Keras's own fit with DataParallel set by hand over the same devices, no acceltrain
  (`--loop keras-dp`); under launch, two processes joined to a jax.distributed job by the script itself (`--job`),
  each fitting its own share. What Keras's fit costs over the floor there is Keras's, not acceltrain's.
The variants are interleaved round by round, so the machine's load falls on all alike; a variant's noise is the
spread of its rounds (benchmarks/_noise.py). Records the section "small-steps" (results/small-steps.json), and the
LSTM's "small-steps-lstm": two records, so that each run fits in minutes on a loaded machine.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _noise, _results  # noqa: E402

SECTION = "small-steps"
SCRIPT = Path(__file__).resolve().parent / "small_steps_script.py"
PLACES = ("1", "4", "8", "launch")
STEPS = {"mlp": 300, "lstm": 40, "bilstm": 40}  # an epoch's steps: the MLP's take about a millisecond, the LSTMs' tens
GOAL = 1.5  # the issue's: acceltrain's step within 1.5x the hand-written one on the same devices


SCRIPT_LOOPS = {"floor": "hand", "keras": "keras-dp", "run": "fit", "plain": "fit"}
PROCESSES, DEVICES_EACH = 2, 2  # launch's job


def command(model: str, place: str, loop: str, steps: int) -> tuple[list, dict]:
    """The command line of one variant, and its environment's additions (plain Keras's 2-process job: commands())."""
    acceltrain = [sys.executable, "-m", "acceltrain"]
    script = [str(SCRIPT), "--model", model, "--loop", SCRIPT_LOOPS[loop], "--steps", str(steps)]
    if place == "launch":
        return [*acceltrain, "launch", "--processes", str(PROCESSES), "--simulate-devices", str(DEVICES_EACH),
                *script], {}
    if loop == "run":
        return [*acceltrain, "run", "--simulate-devices", place, *script], {}
    return [sys.executable, *script], {"XLA_FLAGS": f"--xla_force_host_platform_device_count={place}"}


def commands(model: str, place: str, loop: str, steps: int) -> list[tuple[list, dict]]:
    """Each process's command line and environment additions: one, but for plain Keras in launch's job, where the
    script starts each of the processes' jax.distributed itself (no acceltrain)."""
    if not (place == "launch" and loop == "keras"):
        return [command(model, place, loop, steps)]
    with socket.socket() as free:  # a port for the job's coordinator, as launch picks one
        free.bind(("127.0.0.1", 0))
        coordinator = f"127.0.0.1:{free.getsockname()[1]}"
    script = [str(SCRIPT), "--model", model, "--loop", SCRIPT_LOOPS[loop], "--steps", str(steps)]
    return [([sys.executable, *script, "--job", f"{coordinator},{PROCESSES},{index}"],
             {"XLA_FLAGS": f"--xla_force_host_platform_device_count={DEVICES_EACH}"}) for index in range(PROCESSES)]


def measure(model: str, place: str, loop: str, steps: int) -> float | None:
    """Seconds a step, process 0's (None: the run failed; its end printed)."""
    children = []
    for args, extra in commands(model, place, loop, steps):
        env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2", **extra,
               "PYTHONPATH": os.pathsep.join(p for p in (str(_results.REPO / "src"), os.environ.get("PYTHONPATH"))
                                             if p)}
        children.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        ends = [child.communicate(timeout=900) for child in children]
    finally:
        for child in children:  # one process failed or timed out: its partner would wait in the job for ever
            if child.poll() is None:
                child.kill()
                child.wait()
    stdout, stderr = ends[0]
    lines = [line.removeprefix("[0] ") for line in stdout.splitlines() if line.startswith(("{", "[0] {"))]
    if any(child.returncode != 0 for child in children) or not lines:
        print("".join(err for _, err in ends)[-2000:], file=sys.stderr)
        return None
    return json.loads(lines[-1])["step_seconds"]


def variants(models, places=PLACES) -> dict:
    found = {}
    for model in models:
        found[f"{model} plain"] = {"model": model, "place": "1", "loop": "plain", "runs": []}
        for place in places:
            for loop in ("floor", "run") if place == "1" else ("floor", "keras", "run"):
                found[f"{model} {loop} {place}"] = {"model": model, "place": place, "loop": loop, "runs": []}
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--models", nargs="+", choices=tuple(STEPS), default=["mlp"])
    parser.add_argument("--section", default=SECTION, help="the record's name (small-steps-lstm: the LSTM's)")
    parser.add_argument("--places", nargs="+", choices=PLACES, default=PLACES,
                        help="where to run (launch alone: small-steps-launch, issue 45's bilstm under launch)")
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    rounds = 1 if args.quick else args.rounds
    steps = {model: (20 if args.quick else STEPS[model]) for model in args.models}
    measured = variants(args.models, args.places)
    loads = [_results.load_average()]
    for _ in range(rounds):
        for label, variant in measured.items():
            variant["runs"].append(measure(variant["model"], variant["place"], variant["loop"], steps[variant["model"]]))
            print(label, variant["runs"][-1], file=sys.stderr, flush=True)
        loads.append(_results.load_average())
    run.save(args.section, {"rounds": rounds, "steps": steps, "batch": 32, "loads": loads,
                       "variants": [{"label": label, **variant} for label, variant in measured.items()]})


# --- Rendering ----------------------------------------------------------------------------------

def summarize(raw: dict) -> dict:
    by = {(v["model"], v["place"], v["loop"]): v["runs"] for v in raw["variants"]}
    rows = []
    for model in raw["steps"]:
        plain = [r for r in by.get((model, "1", "plain"), []) if r is not None]
        for place in (place for place in PLACES if any(v["place"] == place and v["loop"] != "plain"
                                                       for v in raw["variants"])):
            floor = [r for r in by.get((model, place, "floor"), []) if r is not None]
            ours = [r for r in by.get((model, place, "run"), []) if r is not None]
            if not floor or not ours:
                rows.append({"model": model, "place": place, "failed": True})
                continue
            # Plain Keras on the same devices (older records have none): on one device, plain Keras is the plain run.
            keras = plain if place == "1" else [r for r in by.get((model, place, "keras"), []) if r is not None]
            difference = _noise.compare(floor, ours)
            row = {"model": model, "place": place, "floor": statistics.median(floor),
                   "run": statistics.median(ours), "plain": statistics.median(plain) if plain else None,
                   "ratio": difference.ratio, "noise": difference.noise, "verdict": difference.verdict,
                   "says": difference.says("{:.2f}×"), "within_goal": difference.ratio <= GOAL}
            if keras and (place != "1" or (model, "4", "keras") in by):
                keras_over_floor, ours_over_keras = _noise.compare(floor, keras), _noise.compare(keras, ours)
                row.update(keras=statistics.median(keras), keras_says=keras_over_floor.says("{:.2f}×"),
                           ours_over_keras=ours_over_keras.says("{:.2f}×"))
            rows.append(row)
    return {"rounds": raw["rounds"], "steps": raw["steps"], "loads": raw["loads"], "rows": rows}


def _ms(seconds) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.2f} ms"


PLACE_WORDS = {"1": "1 device", "4": "4 simulated devices", "8": "8 simulated devices",
               "launch": "launch, 2 processes × 2 devices"}


def render(summary: dict, record: dict) -> str:
    with_keras = any("keras" in row for row in summary["rows"])
    if with_keras:  # plain Keras on the same devices beside them: which part of the gap is Keras's own fit
        table = ["| model | devices | hand-written floor | plain Keras, same devices | Keras / floor | acceltrain | "
                 "acceltrain / floor | within 1.5× | acceltrain / Keras |", "|---|---|---|---|---|---|---|---|---|"]
    else:
        table = ["| model | devices | hand-written floor | acceltrain | acceltrain / floor | within 1.5× | "
                 "plain Keras, 1 device |", "|---|---|---|---|---|---|---|"]
    for row in summary["rows"]:
        if row.get("failed"):
            table.append(f"| {row['model']} | {PLACE_WORDS[row['place']]} | failed | " +
                         ("— | — | failed | — | — | — |" if with_keras else "failed | — | — | — |"))
            continue
        verb = "launch" if row["place"] == "launch" else "run"
        ours = f"{_ms(row['run'])} (`{verb}`) | {row['says']} | {'yes' if row['within_goal'] else '**no**'}"
        if with_keras:
            keras = f"{_ms(row['keras'])} | {row['keras_says']}" if "keras" in row else "— | —"
            table.append(f"| {row['model']} | {PLACE_WORDS[row['place']]} | {_ms(row['floor'])} | {keras} | {ours} | "
                         f"{row.get('ours_over_keras', '—')} |")
        else:
            table.append(f"| {row['model']} | {PLACE_WORDS[row['place']]} | {_ms(row['floor'])} | {ours} | "
                         f"{_ms(row['plain'])} |")
    keras_words = (
        " Plain Keras is Keras's own fit with `DataParallel` set by hand over the same devices and no acceltrain (on "
        "one device, plain Keras's fit; under launch, the script joins the same 2-process job by hand, each process "
        "fitting its own share); like acceltrain, it waits for each step on several CPU devices (without that, "
        "Keras 3.15 lets steps overlap and the 2-process job waits in gloo for ever). Keras / floor is what Keras's "
        "fit costs over the hand-written step; acceltrain / Keras, what acceltrain adds to it."
    ) if with_keras else ""
    floors = [f"{row['model']}: plain Keras's own 2-process fit takes {row['keras'] / row['plain']:.0f}× the plain "
              f"one-device step ({_ms(row['plain'])} → {_ms(row['keras'])})" for row in summary["rows"]
              if row.get("place") == "launch" and row.get("keras") and row.get("plain")]
    floor_words = ("\n\nThe 2-process CPU job's own floor, against one device: " + "; ".join(floors) + ". That is "
                   "the 2-process job's own cost on this machine (the hand-written step in the same job costs about "
                   "as much), not acceltrain's: acceltrain / Keras above is what acceltrain adds.") if floors else ""
    loads = ", ".join(f"{load:.1f}" for load in summary["loads"] if load is not None)
    steps = ", ".join(f"{model} {count}" for model, count in summary["steps"].items())
    return (
        f"## Small steps on several devices ({', '.join(summary['steps'])}): acceltrain against a hand-written "
        "jitted step\n\n"
        f"`{record['command']}`. Batch 32; each figure the second of two epochs ({steps} steps) over its steps, the "
        f"median of {summary['rounds']} round(s), every variant a fresh process, the variants interleaved; the noise "
        f"is the larger spread of the two variants' rounds. Load average over the run: {loads} (on a machine "
        "shared with others). The floor is Keras's `stateless_call` + `optimizer.stateless_apply` jitted over the "
        "same devices, a host sync every step (as Keras's fit makes on several CPU devices); under launch, the same "
        "loop in the same 2-process job." + keras_words + "\n\n" + "\n".join(table) + floor_words
    )


if __name__ == "__main__":
    main()
