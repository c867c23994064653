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


class _Records:
    """256 samples as a Grain data source, noting each record read (Grain checks a resumed source by its repr)."""

    def __init__(self, read: list):
        rng = np.random.default_rng(0)
        self.x = rng.normal(size=(256, 8)).astype("float32")
        self.y = (self.x.sum(axis=1) > 0).astype("int32")
        self.read = read

    def __len__(self):
        return 256

    def __getitem__(self, i):
        self.read.append(i)
        return self.x[i], self.y[i]

    def __repr__(self):
        return "_Records(256)"


def _grain_loader(read=None):
    """A Grain DataLoader of 256 samples in batches of 32, shuffled by its sampler (its own seed)."""
    grain = pytest.importorskip("grain.python")
    sampler = grain.IndexSampler(num_records=256, shard_options=grain.NoSharding(), shuffle=True, seed=3, num_epochs=1)
    return grain.DataLoader(data_source=_Records([] if read is None else read), sampler=sampler, worker_count=0,
                            operations=[grain.Batch(32)])


def test_a_grain_loader_run_stopped_mid_epoch_resumes_bit_identical_reading_no_batch_again(runtime, tmp_path,
                                                                                           capsys):
    """Grain's checkpointable iterator: its get_state() before the batch of the step a checkpoint is written at saved
    beside it (data/epoch-0001-step-00006/position.json), set back with set_state() on resume: the resumed run reads
    on from the next batch (none of the 6 trained before the stop read again) and ends with the whole run's weights."""
    fit = dict(epochs=3, verbose=0, checkpoint_every="3 steps")
    whole = _model(runtime)
    runtime.fit(whole, _grain_loader(), checkpoint_dir=tmp_path / "whole", **fit)
    stopped = _model(runtime)
    with pytest.raises(Interrupted):
        runtime.fit(stopped, _grain_loader(), checkpoint_dir=tmp_path / "stopped", callbacks=[_sigterm_at(13)], **fit)
    assert (tmp_path / "stopped" / "data" / "epoch-0001-step-00006" / "position.json").read_bytes().startswith(b"{")
    resumed, read = _model(runtime, seed=7), []
    try:
        runtime.fit(resumed, _grain_loader(read), checkpoint_dir=tmp_path / "stopped", resume=True, **fit)
    finally:
        runtime.seed(0)
    assert "resuming from epoch-0001-step-00006: 1 epochs and 6 steps done" in capsys.readouterr().err
    for got, expected in zip(resumed.get_weights(), whole.get_weights(), strict=True):
        np.testing.assert_array_equal(got, expected)
    # epoch 1's last 2 batches and epoch 2's 8: 10 batches of 32 (read on from the start of epoch 1: 16)
    assert len(read) == 10 * 32



def test_a_grain_loader_whose_pass_cannot_be_counted_is_refused_with_checkpoints(runtime, tmp_path):
    grain = pytest.importorskip("grain.python")
    endless = grain.IndexSampler(num_records=64, shard_options=grain.NoSharding(), num_epochs=None)
    loader = grain.DataLoader(data_source=[(np.zeros(8, "float32"), 0)] * 64, sampler=endless, worker_count=0,
                              operations=[grain.Batch(32)])
    with pytest.raises(UsageError, match="Grain DataLoader whose batches a pass cannot be counted.*num_epochs=1"):
        runtime.fit(_model(runtime), loader, checkpoint_dir=tmp_path, epochs=1, verbose=0)


def test_a_grain_source_without_a_repr_of_its_own_is_taken_as_the_same_on_resume_another_class_is_not():
    from acceltrain.inputs.grain_loaders import _same_default_repr

    state = b'{"version": 2, "data_source": "<__main__.Source object at 0x7f24792c6850>"}'
    assert b"0x7f00" in _same_default_repr(state, "<__main__.Source object at 0x7f00>")
    assert b"0x7f24792c6850" in _same_default_repr(state, "<__main__.Other object at 0x7f00>")
    assert b"0x7f24792c6850" in _same_default_repr(state, "Source(records=320)")
