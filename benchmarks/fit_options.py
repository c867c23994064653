"""Which of Keras's fit options make acceltrain faster on this machine? Steady epoch of each, side by side.

    python benchmarks/fit_options.py [--rounds 3] [--epochs 4] [--quick]

The seed's MNIST MLP through connect() → scope() → Runtime.fit on JAX, in one process, each option on a
fresh model, the options interleaved round by round (A B C D, A B C D, ...). A run's steady epoch is the
median of its epochs after the first; the section gives each option's median over the rounds and its ratio to
the baseline's, judged against the spread of the same rounds' figures (benchmarks/_noise.py). Records the
section "fit-options". --quick: 1 round of 2 epochs.
"""

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _noise, _results  # noqa: E402

SECTION = "fit-options"
BATCH_SIZE = 1200
# label → (the option, whether it only adds work to each epoch: then it cannot be faster than the baseline)
OPTIONS = {
    "baseline: numpy in, 1 step per call, verbose=0": ({}, False),
    "whole epoch per call (steps_per_execution=50)": ({"steps_per_execution": 50}, False),
    "data placed on the device once (jax arrays in)": ({"on_device": True}, False),
    "progress bar every step (verbose=1)": ({"verbose": 1}, True),
    "a callback with on_train_batch_end (Keras syncs the host every step)": ({"batch_callback": True}, True),
    "checkpoints every epoch (checkpoint_dir, checkpoint_every='1 epoch')": ({"checkpoints": True}, True),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    rounds, epochs = (1, 2) if args.quick else (args.rounds, args.epochs)
    import acceltrain

    runtime = acceltrain.connect(verbose=False)
    import jax
    import keras

    from acceltrain.datasets import load_npz
    from acceltrain.recipes import mnist_mlp

    splits = load_npz()
    x, y = mnist_mlp.preprocess(splits.x_train, splits.y_train)
    x_device, y_device = jax.device_put(x), jax.device_put(y)
    steady = {label: [] for label in OPTIONS}
    epochs_seen = {label: [] for label in OPTIONS}  # every epoch of every run, the first (compiling) included
    for round_ in range(rounds):
        for label, (option, _) in OPTIONS.items():
            keras.utils.set_random_seed(round_)
            with runtime.scope():
                model = mnist_mlp.build_model()
            if "steps_per_execution" in option:
                model.steps_per_execution = option["steps_per_execution"]
            ends = []
            # `acceltrain train` fits one epoch at a time (to checkpoint): time from the first begin only.
            timer = keras.callbacks.LambdaCallback(on_train_begin=lambda logs: ends or ends.append(time.perf_counter()),
                                                   on_epoch_end=lambda epoch, logs: ends.append(time.perf_counter()))
            inputs = (x_device, y_device) if option.get("on_device") else (x, y)
            callbacks = [timer]
            if option.get("batch_callback"):
                callbacks.append(keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: None))
            with contextlib.redirect_stdout(io.StringIO()), tempfile.TemporaryDirectory() as folder:
                # (the progress bar's output is dropped, not its cost)
                runtime.fit(model, *inputs, batch_size=BATCH_SIZE, epochs=epochs, verbose=option.get("verbose", 0),
                            callbacks=callbacks, checkpoint_dir=folder if option.get("checkpoints") else None,
                            **({"checkpoint_every": "1 epoch"} if option.get("checkpoints") else {}))
            seconds = [b - a for a, b in zip(ends, ends[1:])]
            epochs_seen[label].append(seconds)
            steady[label].append(statistics.median(seconds[1:]))
            print(f"round {round_ + 1}: {label}: {steady[label][-1]:.3f} s", file=sys.stderr, flush=True)
    run.save(SECTION, {"rounds": rounds, "epochs": epochs, "batch_size": BATCH_SIZE,
                       "steps_per_epoch": len(x) // BATCH_SIZE, "runtime": str(runtime),
                       "options": [{"label": label, "adds_work": OPTIONS[label][1], "steady_seconds": values,
                                    "epoch_seconds": epochs_seen[label]} for label, values in steady.items()]})


# --- Rendering ----------------------------------------------------------------------------------

def summarize(raw: dict) -> dict:
    return {**{key: raw[key] for key in ("rounds", "epochs", "batch_size", "steps_per_epoch", "runtime")},
            "options": [{"label": o["label"], "adds_work": o["adds_work"],
                         "median": statistics.median(o["steady_seconds"]), "spread": _noise.spread(o["steady_seconds"])}
                        for o in raw["options"]]}


def judged(summary: dict) -> list[tuple[dict, _noise.Difference | None]]:
    """Each option's median against the baseline's (the first option), judged by the spread of the same rounds'
    figures: the verdict and its noise from one statistic."""
    base = summary["options"][0]
    return [(option, None if option is base else
             _noise.judge(option["median"] / base["median"], (base["spread"], option["spread"]),
                          adds_work=option["adds_work"]))
            for option in summary["options"]]


def render(summary: dict, record: dict) -> str:
    table = ["| option | median steady epoch | spread over rounds | median / baseline's median |",
             "|---|---|---|---|"]
    for option, difference in judged(summary):
        spread = _results.not_recorded(option["spread"], "{:.0%}")
        versus = "1.000× (the control)" if difference is None else difference.says("{:.3f}×")
        table.append(f"| {option['label']} | {option['median']:.3f} s | {spread} | {versus} |")
    said = []
    for verdicts, words in (((_noise.HIGHER, _noise.LOWER), "Beyond this run's noise"),
                            ((_noise.WITHIN,), "Within it"), ((_noise.UNKNOWN,), "With the noise unknown"),
                            ((_noise.INCONCLUSIVE,), "Inconclusive (faster than the baseline they only add work to)")):
        labels = [option["label"] for option, difference in judged(summary)
                  if difference and difference.verdict in verdicts]
        if labels:
            said.append(f"{words}: {'; '.join(labels)}.")
    said = " ".join(said)
    return (
        "## Fit options on this CPU: steady epoch of the seed's MNIST job, acceltrain on JAX\n\n"
        f"`{record['command']}`, {summary['runtime']}. One process, a fresh model per run, the options interleaved "
        f"over {summary['rounds']} round(s) of {summary['epochs']} epochs; batch {summary['batch_size']}, "
        f"{summary['steps_per_epoch']} steps an epoch. A run's steady epoch is the median of its epochs after the "
        "first; an option's median over the rounds is judged against the baseline's, with the spread of both over the "
        f"rounds as the noise. {said}\n\n" + "\n".join(table)
    )


if __name__ == "__main__":
    main()
