"""Exact resume for tf.data.Dataset inputs: a reshuffling pipeline stopped mid-epoch resumes bit-identical."""

import os
import re
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
    # only those the kept checkpoints (epoch-0002-step-00007, epoch-0003-step-00000) need: the first's, and its epoch's start
    assert positions == ["epoch-0002", "epoch-0002-step-00007"]


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


def _counted(shape: str, read: list):
    """256 samples in batches of 32 (8 steps an epoch), each sample's read from the source appended to `read`, then
    the pipeline of `shape`. Returns (dataset, its steps an epoch). The counter is a py_function, state tf.data
    does not checkpoint: the options let its iterator be saved without it (the count plays no part in the data)."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int32")

    def count(x, y):
        def note(row):
            read.append(int(row))
            return row
        tf.py_function(note, [tf.constant(0)], tf.int32)
        return x, y

    source = tf.data.Dataset.from_tensor_slices((x, y)).map(count)
    steps = 8
    if shape == "seeded shuffle":
        pipeline = source.shuffle(256, seed=3).batch(32)
    elif shape == "no shuffle":
        pipeline = source.batch(32)
    elif shape == "stateless random map":  # its seeds from tf.data.Dataset.random, which tf.data checkpoints
        seeds = tf.data.Dataset.random(seed=4).batch(2)
        pipeline = tf.data.Dataset.zip(source.shuffle(64, seed=3), seeds).map(
            lambda xy, seed: (xy[0] + 0.1 * tf.random.stateless_normal([8], seed=seed), xy[1])).batch(32)
    elif shape == "stateful random map":  # tf.random.uniform: its state is not checkpointed; each pass draws anew
        pipeline = source.map(lambda x, y: (x * tf.random.uniform([], 0.5, 1.5, seed=5), y)).batch(32)
    elif shape == "repeat":  # each pass twice over the samples, reshuffled in between
        pipeline, steps = source.shuffle(256, seed=3).batch(32).repeat(2), 16
    elif shape == "unknown length":  # a filter: its length only as the user asserts it (as checkpoints ask)
        pipeline = source.filter(lambda x, y: x[0] < 10.0).batch(32).apply(tf.data.experimental.assert_cardinality(8))
    options = tf.data.Options()
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    return pipeline.with_options(options), steps


@pytest.mark.parametrize("shape", ["seeded shuffle", "no shuffle", "stateless random map", "repeat",
                                   "unknown length", "stateful random map"])
def test_a_dataset_resume_reads_none_of_the_batches_it_skips_and_ends_where_the_whole_run_did(runtime, tmp_path,
                                                                                             capsys, shape):
    """Stopped at step 2 of the last epoch (the checkpoint epoch-0001-step-00002), a resume restores tf.data's
    iterator as it stood at that checkpoint and the batches Keras had read ahead: it reads from the source at most
    the batches left (reading the pass again from its start would read 2 more), and ends with the whole run's
    weights. A map drawing with tf.random's stateful ops is the one pipeline that must read the pass again, and
    says so."""
    fit = dict(epochs=2, verbose=0, checkpoint_every="3 steps")
    dataset, steps = _counted(shape, [])
    whole = _model(runtime)
    runtime.fit(whole, dataset, checkpoint_dir=tmp_path / "whole", **fit)
    stopped = _model(runtime)
    with pytest.raises(Interrupted):
        runtime.fit(stopped, _counted(shape, [])[0], checkpoint_dir=tmp_path / "stopped",
                    callbacks=[_sigterm_at(steps + 1)], **fit)
    capsys.readouterr()
    resumed, read = _model(runtime, seed=7), []
    try:
        runtime.fit(resumed, _counted(shape, read)[0], checkpoint_dir=tmp_path / "stopped", resume=True, **fit)
    finally:
        runtime.seed(0)
    said = capsys.readouterr().err
    assert "resuming from epoch-0001-step-00002: 1 epochs and 2 steps done" in said
    for got, expected in zip(resumed.get_weights(), whole.get_weights(), strict=True):
        np.testing.assert_array_equal(got, expected)
    if shape == "stateful random map":
        assert ("the data read again from epoch-0001's start to epoch-0001-step-00002: 2 batch(es) read and not "
                "trained, as its map draws with RandomUniform") in said
        assert len(read) >= steps * 32
    else:
        assert "the data resumed where it stood at epoch-0001-step-00002 (tf.data's iterator state" in said
        assert "no batch read again" in said
        assert len(read) <= (steps - 2) * 32, f"read {len(read)} samples for the {steps - 2} batches left"


@pytest.mark.parametrize("draws", ["keras layer", "tf.random"])
def test_a_dataset_whose_iterator_tensorflow_cannot_save_trains_and_resumes_saying_how_the_resume_differs(
        runtime, tmp_path, capsys, draws):
    """A Keras preprocessing layer in a map (its seed a variable) or a stateful tf.random op: tf.data refuses to save
    the iterator, which is no reason to refuse the fit (Keras's own fit runs it). It trains, says once why its
    resume cannot be exact and how to make it so, and a resume reads the stopped epoch's pass again from its start."""
    import keras
    import tensorflow as tf

    flip = keras.layers.RandomFlip("horizontal", seed=1) if draws == "keras layer" else None

    def dataset():
        if flip is not None:
            return _dataset().map(lambda x, y: (tf.reshape(flip(tf.reshape(x, [-1, 2, 4, 1])), [-1, 8]), y))
        return _dataset().map(lambda x, y: (x * tf.random.uniform([], seed=5), y))

    assert _dataset().element_spec[0].shape[-1] == 8  # the reshape above: 8 features as a 2 x 4 image
    fit = dict(epochs=2, verbose=0, checkpoint_every="3 steps")
    stopped = _model(runtime)
    with pytest.raises(Interrupted):
        runtime.fit(stopped, dataset(), checkpoint_dir=tmp_path, callbacks=[_sigterm_at(8 + 4)], **fit)
    said = capsys.readouterr().err
    assert said.count("tf.data cannot save this dataset's iterator") == 1
    assert re.search(r"is stateful.*stateless_.*Dataset.random.*in the model rather than in the dataset's map", said)
    resumed = _model(runtime, seed=7)
    try:
        history = runtime.fit(resumed, dataset(), checkpoint_dir=tmp_path, resume=True, **fit)
    finally:
        runtime.seed(0)
    said = capsys.readouterr().err
    assert re.search(r"the data read again from epoch-0001's start to epoch-0001-step-0*(\d+): \1 batch\(es\) read and "
                     r"not trained, as (tf.data cannot save this dataset's iterator|its map draws with RandomUniform)", said), said
    assert np.isfinite(history.history["loss"][-1])


def _tf_data_resume(tmp_path, devices: int, shape: str) -> dict:
    import json

    from tests import support

    done = support.python(support.SCRIPTS / "tf_data_resume.py", tmp_path, devices, shape, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.tensorflow
@pytest.mark.parametrize("devices", [1, 2])
def test_on_tensorflow_a_dataset_run_stopped_mid_epoch_resumes_bit_identical_training_every_batch_once(tmp_path,
                                                                                                      devices):
    """The TensorFlow backend, at 1 device and under MirroredStrategy over 2 (issue 45): Adam + accuracy, a seeded
    reshuffling pipeline of a length TensorFlow knows, checkpoints every 3 steps, SIGTERM in the second epoch. Keras's
    TensorFlow trainer reads one batch of each fit under a strategy through an iterator it then drops: fed a generator,
    2 of each pass's 8 batches were lost there (6 steps an epoch, their order shifted on resume). Each epoch trains its
    8 batches, the optimizer counts 24 steps for 24 batches, the resumed run ends with the whole run's weights, and
    each checkpoint saves at most replicas + 2 batches read ahead (measured: 1 at 1 device, 3 at 2)."""
    found = _tf_data_resume(tmp_path, devices, "drop_remainder")
    assert found["replicas"] == devices
    assert (found["trained"], found["optimizer_steps"]) == (24, 24)
    assert "resuming from epoch-0001-step-0000" in found["said"] and "no batch read again" in found["said"]
    assert found["difference"] == 0.0
    assert found["read_ahead"] and max(found["read_ahead"]) <= devices + 2, found["read_ahead"]


@pytest.mark.tensorflow
def test_on_tensorflow_a_dataset_of_a_length_tensorflow_does_not_know_is_said_not_repeatable_under_a_strategy(tmp_path):
    """256 samples batched by 30: acceltrain drops the partial last batch with a rebatch, whose length TensorFlow does
    not know, and Keras's fit on such a pass under MirroredStrategy can count optimizer steps it never took, at random
    (a plain Keras fit on dataset.rebatch(32, drop_remainder=True) too: 51 optimizer steps for 48 batches). It still
    trains each batch once, and says as each fit starts why it is not repeatable and the two ways to make it so."""
    found = _tf_data_resume(tmp_path, 2, "partial")
    assert found["trained"] == 24
    assert found["said"].count("Keras's fit on such a pass can count optimizer steps it never took") == 3  # each fit's
    assert "batch with drop_remainder=True" in found["said"] and "assert_cardinality(N_BATCHES)" in found["said"]


@pytest.mark.tensorflow
@pytest.mark.parametrize("devices", [1, 2])
def test_on_tensorflow_a_grain_loader_run_stopped_mid_epoch_resumes_bit_identical_training_every_batch_once(tmp_path,
                                                                                                          devices):
    """A Grain DataLoader (shuffled by its sampler) on the TensorFlow backend, at 1 device and under MirroredStrategy
    over 2 (issue 45), Adam + accuracy, checkpoints every 3 steps, SIGTERM in the second epoch: every batch trained
    once (24 steps for 24 batches), Grain's state resumed with no batch read again, the whole run's weights. Given to
    Keras as one generator, Keras's dropped first iterator lost its batches at 2 devices: 12 trained, 15 optimizer
    steps, the resumed weights 0.0115 away."""
    found = _tf_data_resume(tmp_path, devices, "grain")
    assert found["replicas"] == devices
    assert (found["trained"], found["optimizer_steps"]) == (24, 24)
    assert "the data resumed where it stood at epoch-0001-step-00005" in found["said"], found["said"]
    assert "no batch read again" in found["said"]
    assert found["difference"] == 0.0
