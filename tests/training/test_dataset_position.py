"""Exact resume for tf.data.Dataset inputs: a reshuffling pipeline stopped mid-epoch resumes bit-identical."""

import os
import signal

import numpy as np
import pytest

from acceltrain.errors import UsageError
from acceltrain.training.resumable import Interrupted


def _dataset(repeat: bool = False):
    """A pipeline whose order changes every pass (shuffle reshuffles each iteration by default)."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256, seed=3).batch(32)
    return dataset.repeat() if repeat else dataset


def _model(runtime, seed=0):
    import keras

    runtime.seed(seed)
    with runtime.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dropout(0.1), keras.layers.Dense(2, activation="softmax")])
        model.compile(keras.optimizers.Adam(1e-2), "sparse_categorical_crossentropy")
    return model


def _sigterm_at(step):
    import keras

    class SigtermAt(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == step:
                os.kill(os.getpid(), signal.SIGTERM)

    return SigtermAt()


def test_a_dataset_run_stopped_mid_epoch_resumes_bit_identical(runtime, tmp_path, capsys):
    fit = dict(epochs=3, verbose=0, checkpoint_every="3 steps")
    whole = _model(runtime)
    runtime.fit(whole, _dataset(), checkpoint_dir=tmp_path / "whole", **fit)

    stopped = _model(runtime)
    with pytest.raises(Interrupted):
        runtime.fit(stopped, _dataset(), checkpoint_dir=tmp_path / "stopped", callbacks=[_sigterm_at(13)], **fit)
    # A fresh model and a fresh pipeline, as in a new process, born with other weights: a resume that restarted
    # from scratch (training is deterministic) could not end where the whole run did.
    resumed = _model(runtime, seed=7)
    try:
        history = runtime.fit(resumed, _dataset(), checkpoint_dir=tmp_path / "stopped", resume=True, **fit)
    finally:
        runtime.seed(0)  # the shared runtime's seed, as the other tests expect it
    # SIGTERM as step 14 starts (8 steps an epoch): that step finishes, then the checkpoint.
    assert "resuming from epoch-0001-step-00006: 1 epochs and 6 steps done" in capsys.readouterr().err
    assert len(history.history["loss"]) == 3
    for got, expected in zip(resumed.get_weights(), whole.get_weights(), strict=True):
        np.testing.assert_array_equal(got, expected)
    positions = sorted(p.name for p in (tmp_path / "stopped" / "data").iterdir())
    assert "epoch-0000" not in positions and positions[-1] == "epoch-0002"  # only those a kept checkpoint needs


def test_a_dataset_of_unknown_length_is_refused_with_checkpoints(runtime, tmp_path):
    with pytest.raises(UsageError, match="unknown or infinite length.*assert_cardinality"):
        runtime.fit(_model(runtime), _dataset(repeat=True), checkpoint_dir=tmp_path, verbose=0)
