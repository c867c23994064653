"""Runtime.fit with checkpoints follows the user's shuffle, and leaves out different samples each epoch."""

import re

import numpy as np
import pytest

from acceltrain import inputs
from tests.test_runtime import _mlp, _toy_data


@pytest.fixture
def epoch_orders(monkeypatch):
    """The sample order each epoch of resumable.fit trains on, recorded (on JAX it gathers each batch as Keras asks
    for it: inputs.Fit.epoch_batches)."""
    seen = []
    epoch_batches = inputs.Fit.epoch_batches

    def recording(fit, order, first_step=0):
        batches = epoch_batches(fit, order, first_step)
        seen.append(np.asarray(batches.order).copy())
        return batches

    monkeypatch.setattr(inputs.Fit, "epoch_batches", recording)
    return seen


def test_left_out_samples_change_from_epoch_to_epoch(runtime, tmp_path, epoch_orders, capsys):
    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(100)  # 100 = 3 × 32 + 4: the last 4 of each epoch's order cannot split over 8 replicas
    runtime.fit(model, x, y, batch_size=32, epochs=3, verbose=0, checkpoint_dir=tmp_path / "ckpt")
    assert "left out 4 training sample(s) of each epoch" in capsys.readouterr().err
    assert [len(order) for order in epoch_orders] == [96, 96, 96]
    left_out = [frozenset(range(100)) - frozenset(order.tolist()) for order in epoch_orders]
    assert all(len(s) == 4 for s in left_out) and len(set(left_out)) == 3


def test_shuffle_false_is_kept_with_checkpoints(runtime, tmp_path, epoch_orders, capsys):
    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(100)
    runtime.fit(model, x, y, batch_size=32, epochs=2, shuffle=False, verbose=0, checkpoint_dir=tmp_path / "ckpt")
    assert "ignored" not in capsys.readouterr().err
    for order in epoch_orders:
        np.testing.assert_array_equal(order, np.arange(96))


def test_the_callbacks_see_one_training_run_though_keras_fit_is_called_once_an_epoch(runtime, tmp_path):
    import keras

    class Recording(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.calls = []

        def on_train_begin(self, logs=None):
            self.calls.append(("begin", logs))

        def on_train_end(self, logs=None):
            self.calls.append(("end", logs))

    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(96)
    callback = Recording()
    history = runtime.fit(model, x, y, batch_size=32, epochs=3, verbose=0, callbacks=[callback],
                          checkpoint_dir=tmp_path / "ckpt")

    assert [name for name, _ in callback.calls] == ["begin", "end"]
    assert callback.calls[1][1]["loss"] == history.history["loss"][-1]  # the last epoch's logs
    assert "on_train_begin" not in vars(callback) and "on_train_end" not in vars(callback)  # its own methods again


def test_sample_weights_follow_their_samples_through_each_epochs_order(runtime, tmp_path):
    """Half the samples have weight 0 and labels 10,000 off: any of them that meets a weight of 1 in a shuffled
    epoch makes the loss about 10^7. The learning rate is 0, so the loss is the data's alone."""
    import keras

    with runtime.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.0), "mse")
    x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
    ignored = np.arange(64) % 2 == 1
    y = np.where(ignored, 1e4, 0.0).astype("float32")
    history = runtime.fit(model, x, y, batch_size=16, epochs=2, verbose=0, sample_weight=(~ignored).astype("float32"),
                          checkpoint_dir=tmp_path / "ckpt")
    assert max(history.history["loss"]) < 100, history.history["loss"]


def test_validation_split_is_made_once_and_never_trained_on(runtime, tmp_path, epoch_orders):
    """The samples each epoch trains on are the first 80, every epoch."""
    with runtime.scope():
        model = _mlp(features=1)
    x, y = np.arange(100, dtype="float32")[:, None], np.arange(100) % 4
    history = runtime.fit(model, x, y, batch_size=16, epochs=2, verbose=0, validation_split=0.2,
                          checkpoint_dir=tmp_path / "ckpt")

    assert [set(order.tolist()) for order in epoch_orders] == [set(range(80))] * 2  # 80-99: validation only
    assert len(history.history["val_loss"]) == 2


def test_a_resumed_run_times_only_what_it_ran(runtime, tmp_path):
    """Issue 20, item 14: history.timed_epochs holds the epochs this process ran, the resumed one with the steps
    it ran of it; epoch_seconds keeps every epoch's (the earlier process's too)."""
    import shutil

    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(256)  # 8 steps of 32 an epoch
    folder = tmp_path / "ckpt"
    runtime.fit(model, x, y, batch_size=32, epochs=1, verbose=0, checkpoint_dir=folder, checkpoint_every="3 steps",
                keep_checkpoints=5)
    kept = sorted(p.name for p in folder.iterdir() if p.name.startswith("epoch-"))
    for name in kept[kept.index("epoch-0000-step-00006") + 1:]:  # as if killed after step 6 of epoch 1
        shutil.rmtree(folder / name)
    history = runtime.fit(model, x, y, batch_size=32, epochs=3, verbose=0, checkpoint_dir=folder, resume=True,
                          checkpoint_every="3 steps", keep_checkpoints=5)
    assert [(e["epoch"], e["steps"]) for e in history.timed_epochs] == [(1, 2), (2, 8), (3, 8)]
    assert len(history.epoch_seconds) == 3


def _kept(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("epoch-"))


def test_auto_checkpoints_the_first_epoch_then_every_few_as_decided_from_what_it_measured(runtime, tmp_path,
                                                                                           monkeypatch, capsys):
    """The default cadence: the run's first epoch is checkpointed; at its second, choose_checkpoint_epochs gets that
    epoch's time and the first checkpoint's write time, both measured; then every chosen count from the last one,
    and the last epoch."""
    from acceltrain.training import resumable

    asked = []

    def every_three(epoch_seconds, checkpoint_seconds, epochs_left):
        asked.append((epoch_seconds, checkpoint_seconds))
        assert epochs_left == 7  # the run's 8 epochs after its first checkpoint's
        return 3, "the reason and its numbers"

    monkeypatch.setattr(resumable.decisions, "choose_checkpoint_epochs", every_three)
    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(256)
    folder = tmp_path / "ckpt"
    history = runtime.fit(model, x, y, batch_size=32, epochs=8, verbose=0, checkpoint_dir=folder, keep_checkpoints=10)

    assert _kept(folder) == [f"epoch-000{e}-step-00000" for e in (1, 4, 7, 8)]
    [(epoch_seconds, written)] = asked  # decided once
    assert epoch_seconds == history.epoch_seconds[1] and 0 < written < history.epoch_seconds[0] + epoch_seconds
    assert ("acceltrain: checkpoints (--checkpoint-every auto, checkpoint_every='auto'): the reason and its numbers; "
            "pass another to choose") in capsys.readouterr().err


def test_auto_on_a_run_of_one_epoch_says_its_one_checkpoint_at_the_end(runtime, tmp_path, capsys):
    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(64)
    folder = tmp_path / "ckpt"
    runtime.fit(model, x, y, batch_size=32, epochs=1, verbose=0, checkpoint_dir=folder)

    assert _kept(folder) == ["epoch-0001-step-00000"]
    assert ("checkpoints (--checkpoint-every auto, checkpoint_every='auto'): this run trains one epoch → a checkpoint "
            "at its end only") in capsys.readouterr().err


def test_auto_says_what_it_measured_and_does_what_it_says(runtime, tmp_path, capsys):
    import re

    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(256)
    folder = tmp_path / "ckpt"
    runtime.fit(model, x, y, batch_size=32, epochs=6, verbose=0, checkpoint_dir=folder, keep_checkpoints=10)

    said = re.search(r"checkpoints \(--checkpoint-every auto, checkpoint_every='auto'\): a checkpoint took \d+ ms to "
                     r"write, [\d.]+% of a [\d.]+ s epoch .*→ every (epoch|(\d+) epochs)", capsys.readouterr().err)
    assert said, "no decision said"
    every = int(said.group(2) or 1)
    expected = sorted({1, *range(1 + every, 7, every), 6})  # the first, every `every` after it, the last
    assert _kept(folder) == [f"epoch-000{e}-step-00000" for e in expected]


@pytest.mark.parametrize("every, expected", [("1 epoch", [1, 2, 3, 4]), ("2 epochs", [2, 4]), ("3", [3, 4])])
def test_a_count_of_epochs_the_user_set_is_kept_and_nothing_is_decided(runtime, tmp_path, capsys, every, expected):
    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(256)
    folder = tmp_path / "ckpt"
    runtime.fit(model, x, y, batch_size=32, epochs=4, verbose=0, checkpoint_dir=folder, keep_checkpoints=10,
                checkpoint_every=every)
    assert _kept(folder) == [f"epoch-000{e}-step-00000" for e in expected]
    assert "--checkpoint-every auto" not in capsys.readouterr().err


def test_auto_times_the_first_epochs_steps_and_checkpoints_within_epochs_where_they_are_long(runtime, tmp_path,
                                                                                              monkeypatch, capsys):
    """An epoch longer than the most time 'auto' lets pass between checkpoints (made 0.05 s here, so that this
    tiny one is) gets checkpoints within it, every as many steps as take that long, measured; said once."""
    from acceltrain import decisions

    monkeypatch.setattr(decisions, "MOST_SECONDS_BETWEEN_CHECKPOINTS", 1e-9)  # every step is longer
    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(32 * 16)  # 16 steps an epoch: timed from step 3 to 11 of the first
    folder = tmp_path / "ckpt"
    runtime.fit(model, x, y, batch_size=32, epochs=2, verbose=0, checkpoint_dir=folder, keep_checkpoints=100)

    said = capsys.readouterr().err
    assert said.count("→ every step (0 s) within each epoch, and at its end; pass another to choose") == 1, said
    kept = _kept(folder)
    # From the decision on (at the first epoch's batch 10: 8 steps timed from batch 2), at every execution's start:
    # the first epoch's run 2 steps each while timed (on device data; 1 on Keras's path), later ones every step
    first = [k for k in kept if k.startswith("epoch-0000-")]
    assert first in ([f"epoch-0000-step-{s:05d}" for s in range(10, 16, step)] for step in (1, 2)), first
    assert [k for k in kept if k.startswith("epoch-0001-")] == [f"epoch-0001-step-{s:05d}" for s in range(0, 16)]
    assert kept[-1] == "epoch-0002-step-00000"


def test_auto_leaves_short_epochs_checkpointed_at_their_ends(runtime, tmp_path, capsys):
    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(32 * 16)
    folder = tmp_path / "ckpt"
    runtime.fit(model, x, y, batch_size=32, epochs=2, verbose=0, checkpoint_dir=folder, keep_checkpoints=100)
    assert all(name.endswith("-step-00000") for name in _kept(folder))
    assert "within each epoch" not in capsys.readouterr().err


def test_a_run_early_stopping_ended_is_checkpointed_with_its_best_weights_and_a_resume_trains_no_further(
        runtime, tmp_path, capsys):
    """EarlyStopping(restore_best_weights=True) ends the run at epoch 2 (no improvement by 10): its final checkpoint
    is written after on_train_end restored epoch 1's weights, and a resume restores those and trains no further
    (it would otherwise train on from an older checkpoint, EarlyStopping's count reset)."""
    import keras

    def stopping():
        return keras.callbacks.EarlyStopping(monitor="loss", min_delta=10, patience=1, restore_best_weights=True)

    x, y = _toy_data(256)
    folder = tmp_path / "ckpt"
    with runtime.scope():
        model = _mlp()
    history = runtime.fit(model, x, y, batch_size=32, epochs=20, verbose=0, checkpoint_dir=folder,
                          callbacks=[stopping()], keep_checkpoints=10)
    assert len(history.history["loss"]) == 2
    assert _kept(folder) == ["epoch-0001-step-00000", "epoch-0002-step-00000"]
    ended = [np.asarray(w) for w in model.get_weights()]

    with runtime.scope():
        resumed = _mlp()
    again = runtime.fit(resumed, x, y, batch_size=32, epochs=20, verbose=0, checkpoint_dir=folder, resume=True,
                        callbacks=[stopping()], keep_checkpoints=10)
    assert "the run had ended at epoch 2, stopped by a callback of its own (EarlyStopping): training no further" \
        in capsys.readouterr().err
    assert len(again.history["loss"]) == 2 and _kept(folder)[-1] == "epoch-0002-step-00000"
    for got, expected in zip(resumed.get_weights(), ended, strict=True):
        np.testing.assert_array_equal(got, expected)


# --- An engine reruns the same command: resume=True on an empty or missing folder starts the run (issue 35) --------

@pytest.mark.parametrize("made", [False, True], ids=["missing", "empty"])
def test_resume_on_an_empty_or_missing_folder_starts_and_then_continues(runtime, tmp_path, capsys, made):
    folder = tmp_path / "ckpt"
    if made:
        folder.mkdir()
    x, y = _toy_data(96)
    with runtime.scope():
        model = _mlp()
    history = runtime.fit(model, x, y, batch_size=32, epochs=1, verbose=0, checkpoint_dir=folder, resume=True)
    assert len(history.history["loss"]) == 1
    assert f"no checkpoint in {folder}: starting from the beginning" in capsys.readouterr().err
    with runtime.scope():
        again = _mlp()
    history = runtime.fit(again, x, y, batch_size=32, epochs=2, verbose=0, checkpoint_dir=folder, resume=True)
    assert "resuming from epoch-0001-step-00000: 1 epochs and 0 steps done" in capsys.readouterr().err
    assert len(history.history["loss"]) == 2


def _py_dataset(reads: list):
    """16 batches of 16 (the last of 8), each read noted."""
    import keras

    rng = np.random.default_rng(0)
    x = rng.normal(size=(248, 8)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int32")

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):
            reads.append(i)
            return x[i * 16:(i + 1) * 16], y[i * 16:(i + 1) * 16]

    return Batches()


def test_a_py_dataset_run_stopped_mid_epoch_resumes_bit_identical_from_the_next_batch(runtime, tmp_path, capsys):
    """A PyDataset is rewound by index: its batches in an order drawn from (seed, epoch), so a run stopped at step 21
    (epoch 1, step 5) and resumed reads on from the batch after the last it trained (the rest of epoch 1 as the
    whole run read it) and ends with the whole run's weights."""
    from tests.inputs.test_tf_data import _model, _sigterm_at
    from acceltrain.training.resumable import Interrupted

    fit = dict(epochs=2, verbose=0, checkpoint_every="3 steps")
    whole_reads, stopped_reads, resumed_reads = [], [], []
    whole = _model(runtime)
    runtime.fit(whole, _py_dataset(whole_reads), checkpoint_dir=tmp_path / "whole", **fit)
    stopped = _model(runtime)
    with pytest.raises(Interrupted):
        runtime.fit(stopped, _py_dataset(stopped_reads), checkpoint_dir=tmp_path / "stopped",
                    callbacks=[_sigterm_at(20)], **fit)
    resumed = _model(runtime, seed=7)
    try:
        runtime.fit(resumed, _py_dataset(resumed_reads), checkpoint_dir=tmp_path / "stopped", resume=True, **fit)
    finally:
        runtime.seed(0)
    assert "resuming from epoch-0001-step-00005: 1 epochs and 5 steps done" in capsys.readouterr().err
    for got, expected in zip(resumed.get_weights(), whole.get_weights(), strict=True):
        np.testing.assert_array_equal(got, expected)
    epoch_1 = whole_reads[-16:]  # the whole run's second epoch, batch by batch (Keras's first look at fit's start aside)
    assert sorted(epoch_1) == list(range(16)) and epoch_1 != list(range(16))  # shuffled, each batch once
    assert resumed_reads[-11:] == epoch_1[5:]  # on from the batch after the fifth


# --- A notice: the stopped epoch's line says where it stopped, and validation after it is skipped (issue 44) -------

def _notice_run(runtime, tmp_path, signal_at: str):
    """Runtime.fit with validation data, SIGTERM sent to this process at `signal_at` ("step": the second epoch's
    step 5; "validation": the first epoch's second validation batch). Returns (the Interrupted, validation batches
    begun after the signal)."""
    import os
    import signal

    import keras

    from acceltrain.training.resumable import Interrupted

    class Notice(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.epoch, self.sent, self.after = None, False, 0

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_begin(self, batch, logs=None):
            if signal_at == "step" and self.epoch == 1 and batch == 5 and not self.sent:
                self.sent = True
                os.kill(os.getpid(), signal.SIGTERM)

        def on_test_batch_begin(self, batch, logs=None):
            self.after += self.sent
            if signal_at == "validation" and batch == 1 and not self.sent:
                self.sent = True
                os.kill(os.getpid(), signal.SIGTERM)

    x, y = _toy_data()
    with runtime.scope():
        model = _mlp()
    notice = Notice()
    with pytest.raises(Interrupted) as stopped:
        runtime.fit(model, x, y, batch_size=32, epochs=3, validation_data=_toy_data(128, seed=1), verbose=2,
                    checkpoint_dir=tmp_path, callbacks=[notice])
    return stopped.value, notice.after


def test_an_epoch_a_notice_stopped_says_where_it_stopped_and_skips_its_validation(runtime, tmp_path, capsys):
    stopped, validated_after = _notice_run(runtime, tmp_path, "step")
    # Noted during step 5 (the signal came after the saver's look at it): the next step's start saves step 6.
    assert stopped.exit_code == 42 and stopped.checkpoint.name == "epoch-0001-step-00006"
    out = capsys.readouterr().out
    first, second = out.split("Epoch 2/3")
    assert re.search(r"^16/16 - .* - val_accuracy", first, re.M), out  # the first epoch, whole
    assert re.search(r"^ *6/16 - (?!.*val_).*loss", second, re.M), out  # the second: where it stopped
    assert "16/16" not in second and validated_after == 0  # not the whole epoch; no validation after the notice


def test_a_notice_during_validation_skips_the_rest_of_the_pass_and_checkpoints_the_epoch(runtime, tmp_path, capsys):
    stopped, validated_after = _notice_run(runtime, tmp_path, "validation")
    assert stopped.exit_code == 42 and stopped.checkpoint.name == "epoch-0001-step-00000"  # the epoch, trained whole
    assert validated_after == 0  # the batch in flight when the signal came ran; none after it
    captured = capsys.readouterr()
    assert re.search(r"^16/16 - (?!.*val_).*loss", captured.out, re.M), captured.out
    assert "epoch 1: validation skipped after the notice" in captured.err
