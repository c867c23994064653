"""Which of Keras's fit options make acceltrain faster on this machine? Steady epoch of each, side by side.

    python benchmarks/fit_options.py [--rounds 3] [--epochs 4]

The seed's MNIST MLP through connect() → scope() → Runtime.fit on JAX, in one process, each option on a
fresh model, the options interleaved round by round (A B C D, A B C D, ...). A run's steady epoch is the
median of its epochs after the first; the table gives each option's best and median over the rounds and
its ratio to the baseline's best. Writes BENCHMARKS.md's section "fit-options".
"""

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time

from _report import machine, write_section

import acceltrain

OPTIONS = {
    "baseline: numpy in, 1 step per call, verbose=0": {},
    "whole epoch per call (steps_per_execution=50)": {"steps_per_execution": 50},
    "data placed on the device once (jax arrays in)": {"on_device": True},
    "progress bar every step (verbose=1)": {"verbose": 1},
    "a callback with on_train_batch_end (Keras syncs the host every step)": {"batch_callback": True},
    "checkpoints every epoch, as `acceltrain train` runs (checkpoint_dir)": {"checkpoints": True},
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()
    runtime = acceltrain.connect(verbose=False)
    import jax
    import keras

    from acceltrain.datasets import load_npz
    from acceltrain.recipes import mnist_mlp

    splits = load_npz()
    x, y = mnist_mlp.preprocess(splits.x_train, splits.y_train)
    x_device, y_device = jax.device_put(x), jax.device_put(y)
    steady = {name: [] for name in OPTIONS}
    for round_ in range(args.rounds):
        for name, option in OPTIONS.items():
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
                runtime.fit(model, *inputs, batch_size=1200, epochs=args.epochs, verbose=option.get("verbose", 0),
                            callbacks=callbacks, checkpoint_dir=folder if option.get("checkpoints") else None)
            epochs = [b - a for a, b in zip(ends, ends[1:])][1:]
            steady[name].append(statistics.median(epochs))
            print(f"round {round_ + 1}: {name}: {steady[name][-1]:.3f} s", file=sys.stderr, flush=True)
    base = min(steady[next(iter(OPTIONS))])
    table = ["| option | best steady epoch | median | best / baseline's best |", "|---|---|---|---|"]
    for name, values in steady.items():
        table.append(f"| {name} | {min(values):.3f} s | {statistics.median(values):.3f} s | {min(values) / base:.3f}× |")
    print("\n".join(table))
    write_section(
        "fit-options",
        "## Fit options on this CPU: steady epoch of the seed's MNIST job, acceltrain on JAX\n\n"
        f"`python benchmarks/fit_options.py --rounds {args.rounds} --epochs {args.epochs}` on {machine()}, {runtime}. "
        "One process, a fresh model per run, the options interleaved over the rounds; batch 1200, 50 steps an "
        "epoch. The machine is shared with other work: compare the ratios, measured side by side, and read "
        "differences of a few percent, smaller than the gap between an option's best and median, as noise.\n\n"
        + "\n".join(table),
    )


if __name__ == "__main__":
    main()
