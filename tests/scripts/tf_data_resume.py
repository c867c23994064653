"""A tf.data fit with checkpoints within its epochs on the TensorFlow backend (MirroredStrategy over DEVICES logical
CPUs when DEVICES > 1): the whole run, the same run stopped by SIGTERM, then resumed from a fresh model born of
another seed. Prints one JSON line: the resumed run's largest weight difference from the whole run's, the optimizer's
steps and the batches trained in the whole run, the batches saved read ahead with each checkpoint, what was said.

    python tf_data_resume.py FOLDER DEVICES SHAPE

SHAPE: "drop_remainder" (batch(32, drop_remainder=True): a pass's length TensorFlow knows) or "partial" (batch(30):
256 samples leave a partial last batch, which acceltrain drops with a rebatch, so the length is not known), or "grain" (a
Grain DataLoader of batches of 32, shuffled by its sampler: its read_ahead is not noted, Grain's position is its state).
"""

import contextlib
import io
import json
import os
import signal
import sys
from pathlib import Path

import numpy as np

import acceltrain

folder, devices, shape = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
runtime = acceltrain.connect("tensorflow", simulate_devices=devices if devices > 1 else None, verbose=False)

import keras  # noqa: E402  (after connect(): its backend)
import tensorflow as tf  # noqa: E402

from acceltrain.inputs import tf_data  # noqa: E402
from acceltrain.training.resumable import Interrupted  # noqa: E402

read_ahead = []  # the batches read ahead and not yet trained as each checkpoint within an epoch is saved
_saved_at = tf_data.DatasetFeed.saved_at


def noting(feed, epoch, step, oldest=(0, 0)):
    read_ahead.append(sum(1 for at, _ in feed._ahead if at >= step))
    return _saved_at(feed, epoch, step, oldest)


tf_data.DatasetFeed.saved_at = noting


class Samples:
    """A Grain data source of the rows of x and y (Grain checks a resumed source by its repr)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __repr__(self):
        return f"Samples({len(self.x)})"


def dataset():
    # TensorFlow's global seed, which runtime.seed sets, draws the shuffle's seeds with its own: the same for every
    # run's pipeline, as a script run again makes it
    runtime.seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int32")
    if shape == "grain":  # a Grain DataLoader, shuffled by its sampler's own seed
        import grain

        sampler = grain.samplers.IndexSampler(256, shuffle=True, seed=3, num_epochs=1)
        return grain.DataLoader(data_source=Samples(x, y), sampler=sampler, operations=[grain.transforms.Batch(32)],
                                worker_count=0)
    samples = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256, seed=3)
    return samples.batch(32, drop_remainder=True) if shape == "drop_remainder" else samples.batch(30)


def model(seed):
    runtime.seed(seed)
    with runtime.scope():
        made = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                 keras.layers.Dense(2, activation="softmax")])
        made.compile(keras.optimizers.Adam(1e-2), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return made


class Counted(keras.callbacks.Callback):
    """Counts the batches trained; sends SIGTERM as the optimizer's step `stop` begins."""

    def __init__(self, stop=None):
        super().__init__()
        self.stop, self.trained = stop, 0

    def on_train_batch_begin(self, batch, logs=None):
        if self.stop is not None and int(self.model.optimizer.iterations.numpy()) == self.stop:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_train_batch_end(self, batch, logs=None):
        self.trained += 1


fit = dict(epochs=3, verbose=0, checkpoint_every="3 steps")
said = io.StringIO()
with contextlib.redirect_stderr(said):
    whole, counted = model(0), Counted()
    runtime.fit(whole, dataset(), checkpoint_dir=folder / "whole", callbacks=[counted], **fit)
    read_ahead.clear()  # those of the stopped run only
    try:
        stopped = model(0)
        runtime.fit(stopped, dataset(), checkpoint_dir=folder / "stopped", callbacks=[Counted(stop=8 + 4)], **fit)
        raise SystemExit("the SIGTERM did not stop the run")
    except Interrupted:
        pass
    resumed = model(7)
    runtime.fit(resumed, dataset(), checkpoint_dir=folder / "stopped", resume=True, **fit)
print(json.dumps({
    "difference": max(float(np.abs(a - b).max()) for a, b in zip(resumed.get_weights(), whole.get_weights(), strict=True)),
    "optimizer_steps": int(whole.optimizer.iterations.numpy()), "trained": counted.trained,
    "read_ahead": read_ahead, "replicas": runtime.num_replicas, "said": said.getvalue()}))
