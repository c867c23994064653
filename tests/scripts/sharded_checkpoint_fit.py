"""A model sharded over every device (kernels split along a "model" axis), trained by Runtime.fit with
checkpoints; writes its final weights to OUT/final.npz.

    python sharded_checkpoint_fit.py OUT [--devices 8] [--model-axis 4] [--resume] [--sigterm-at-step K] [--epochs 3]

Run as it is (one process, --devices simulated CPU devices) or under `acceltrain launch` (the job's
devices; --devices is then ignored). --sigterm-at-step sends SIGTERM (or --signal SIGINT) to this process once, when it starts
global step K (process 1 alone, in a multi-process job).
"""

import argparse
import os
import signal
import sys

import numpy as np

import acceltrain

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--devices", type=int, default=8)
parser.add_argument("--model-axis", type=int, default=4)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--resume", action="store_true")
parser.add_argument("--sigterm-at-step", type=int)
parser.add_argument("--every", default="2 steps")
parser.add_argument("--signal", default="SIGTERM", choices=["SIGTERM", "SIGINT"])
args = parser.parse_args()

under_launch = "ACCELTRAIN_PROCESS_ID" in os.environ
runtime = acceltrain.connect(simulate_devices=None if under_launch else args.devices, distribution="none",
                             verbose=False)
runtime.seed(0)

import keras  # noqa: E402  (after connect: the backend is chosen there)

devices = keras.distribution.list_devices()
mesh = keras.distribution.DeviceMesh((len(devices) // args.model_axis, args.model_axis), ["batch", "model"], devices)
layouts = keras.distribution.LayoutMap(mesh)
layouts[".*kernel"] = (None, "model")
sharded = keras.distribution.ModelParallel(layout_map=layouts, batch_dim_name="batch", auto_shard_dataset=False)

rng = np.random.default_rng(0)
x = rng.normal(size=(512, 16)).astype("float32")
y = (x[:, :4].argmax(axis=1)).astype("int32")


class SigtermAt(keras.callbacks.Callback):
    """SIGTERM to this process as global step K starts: a preemption notice at a known moment."""

    def on_train_batch_begin(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step == args.sigterm_at_step and os.environ.get("ACCELTRAIN_PROCESS_ID", "1") == "1":
            os.kill(os.getpid(), getattr(signal, args.signal))


with sharded.scope():
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dropout(0.2), keras.layers.Dense(8, activation="softmax")])
    model.compile(keras.optimizers.Adam(1e-2), "sparse_categorical_crossentropy", metrics=["accuracy"])
    callbacks = [SigtermAt()] if args.sigterm_at_step is not None else []
    try:
        runtime.fit(model, x, y, batch_size=64, epochs=args.epochs, verbose=0, checkpoint_dir=f"{args.out}/checkpoints",
                    checkpoint_every=args.every, resume=args.resume, callbacks=callbacks)
    except acceltrain.errors.AcceltrainError as stopped:
        print(stopped, file=sys.stderr)
        sys.exit(getattr(stopped, "exit_code", 1))

print("kernel placement:", model.layers[0].kernel.value.sharding.spec, file=sys.stderr)
if runtime.process_index == 0:
    np.savez(f"{args.out}/final.npz", *[np.asarray(w) for w in model.get_weights()])
