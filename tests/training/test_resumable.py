"""Runtime.fit with checkpoints follows the user's shuffle, and leaves out different samples each epoch."""

import numpy as np
import pytest

from acceltrain import data
from tests.test_runtime import _mlp, _toy_data


@pytest.fixture
def epoch_orders(monkeypatch):
    """The sample order each epoch of resumable.fit trains on, recorded."""
    seen = []
    take = data.take

    def recording(x, indices):
        if isinstance(indices, np.ndarray) and x is not None and np.ndim(x) == 2:
            seen.append(indices.copy())
        return take(x, indices)

    monkeypatch.setattr(data, "take", recording)
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
