"""backends/jax/resident.py with Runtime.fit's checkpoints (training/resumable.py: one Keras fit an epoch): the arrays
placed on the devices once a Runtime.fit, each epoch's order gathered from them, the same training as Keras's path,
an exact resume mid-epoch, and a second fit on the same shapes compiling nothing new."""

import numpy as np
import pytest

from acceltrain.backends.jax import resident
from tests.backends.jax.test_resident import WEIGHTS, X, Y, _both, _keras_scans, _model, _same

only_keras_3_15 = pytest.mark.skipif(_keras_scans(), reason="Keras 3.16 scans steps_per_execution: device data "
                                                             "steps aside")


def _counting_placements(monkeypatch) -> list:
    placed = []
    placer = resident._placer

    def counting(distribution):
        place = placer(distribution)

        def counted(inputs):
            placed.append(inputs)
            return place(inputs)
        return counted

    monkeypatch.setattr(resident, "_placer", counting)
    return placed


@only_keras_3_15
def test_a_checkpointed_fit_places_its_arrays_once_and_trains_as_keras_path(runtime, monkeypatch, tmp_path, capsys):
    """Adam + accuracy, sample weights, validation data, the partial last batch, 3 epochs each its own Keras fit:
    the training arrays placed once for the whole fit (not once an epoch; validation read from the host, as Keras
    reads it); the same history and weights as Keras's own path."""
    placed = _counting_placements(monkeypatch)
    runs = iter(("on", "off"))

    def train(model):
        return runtime.fit(model, X, Y, sample_weight=WEIGHTS, batch_size=32, epochs=3,
                           validation_data=(X[:64], Y[:64]), verbose=0,
                           checkpoint_dir=tmp_path / next(runs)).history

    on, off = _both(runtime, monkeypatch, train)
    assert "in-memory data on the devices: yes" in capsys.readouterr().err
    assert len(placed) == 1  # the training arrays, once (the "off" run places none)
    _same(on, off)
    assert len(on[1]["val_loss"]) == 3


@only_keras_3_15
def test_a_run_resumed_mid_epoch_on_device_data_ends_as_the_uninterrupted_one(runtime, tmp_path, capsys):
    """Checkpoints every 3 steps of 9-step epochs: executions of 3 steps each start where a checkpoint is due; a run
    stopped after step 3 of epoch 2 and resumed ends with the uninterrupted run's weights."""
    import shutil

    import keras

    def fit(folder, epochs, resume=False, model=None):
        if model is None:
            with runtime.scope():
                model = _model(keras)
        runtime.fit(model, X, Y, batch_size=24, epochs=epochs, verbose=0, checkpoint_dir=folder,
                    checkpoint_every="3 steps", keep_checkpoints=20, resume=resume)  # 200 = 8 × 24 + 8: 9 steps
        return model

    whole = fit(tmp_path / "whole", 3).get_weights()
    assert "steps an execution: 3 (" in capsys.readouterr().err
    folder = tmp_path / "stopped"
    stopped = fit(folder, 2)
    kept = sorted(p.name for p in folder.iterdir() if p.name.startswith("epoch-"))
    assert "epoch-0001-step-00003" in kept
    for name in kept[kept.index("epoch-0001-step-00003") + 1:]:  # as if killed after step 3 of epoch 2
        shutil.rmtree(folder / name)
    resumed = fit(folder, 3, resume=True).get_weights()
    assert "resuming from epoch-0001-step-00003" in capsys.readouterr().err
    for a, b in zip(resumed, whole):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_a_second_fit_on_the_same_shapes_compiles_nothing_new(runtime):
    """Last session's device data made its programs again at every fit (9 of them here, a fit on 8 devices):
    the model's Keras functions and the loop of many steps are kept while the model's compile stands."""
    import jax
    import keras

    from acceltrain import ledger
    from acceltrain.backends import jax as backend

    with runtime.scope():
        model = _model(keras)
    timeline = ledger.Timeline(backend.watch_compiles)
    compiles = []
    for _ in range(3):
        with timeline.window() as fit:
            model.fit(X, Y, batch_size=32, epochs=2, validation_data=(X[:64], Y[:64]), verbose=0)
            jax.effects_barrier()
        compiles.append(fit.ledger.facts.get("compiles", 0))
    assert compiles[0] > 0 and compiles[1:] == [0, 0], compiles
    with runtime.scope():  # a new compile: new programs
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    with timeline.window() as again:
        model.fit(X, Y, batch_size=32, epochs=1, verbose=0)
    assert again.ledger.facts.get("compiles", 0) > 0


def test_keep_data_on_devices_off_keeps_keras_path_says_which_setting_and_ends_with_its_runtime(monkeypatch, capsys):
    """Runtime.keep_data_on_devices("off") (--device-data off) turns device data off for the fits after it, named in
    the decision line; its runtime closed, "auto" again; another value is refused naming the argument."""
    import keras

    import acceltrain
    from acceltrain.backends.jax import steps
    from acceltrain.errors import UsageError

    monkeypatch.setattr(steps, "_told", set())
    # options of its own (a new runtime, not the session's given back): its end closes it, "auto" again
    opened = acceltrain.connect(simulate_devices=8, distribution="data", verbose=False)
    with opened.keep_data_on_devices("off") as runtime:
        assert runtime.device_data == "off"
        with runtime.scope():
            model = _model(keras)
        model.fit(X, Y, batch_size=32, epochs=1, verbose=0)
        with pytest.raises(UsageError, match=r"Received setting='of'\. Valid: auto, off"):
            runtime.keep_data_on_devices("of")
    assert "in-memory data on the devices: no (turned off: --device-data off (Runtime.keep_data_on_devices('off'))" \
        in capsys.readouterr().err
    assert resident.SETTING["device_data"] == "auto"


@only_keras_3_15
def test_checkpoints_auto_within_epochs_or_at_their_ends_train_the_same_weights_bit_for_bit(runtime, monkeypatch,
                                                                                             tmp_path, capsys):
    """checkpoint every='auto' decides from a measured step time (decisions.choose_checkpoint_steps) whether to
    checkpoint within epochs, which sizes the executions: a step measured slow (every 4 steps, as on a loaded machine)
    or fast (at epochs' ends) must train the same weights and history to the bit."""
    import keras

    from acceltrain.backends.jax import steps
    from acceltrain.training import resumable

    rng = np.random.default_rng(1)
    x = rng.normal(size=(400, 6)).astype("float32")  # 25 steps of 16 an epoch: long enough for the step timer
    y = (x[:, 0] > 0).astype("int32")
    trained = []
    for forced in (4, None):
        monkeypatch.setattr(steps, "_told", set())
        monkeypatch.setattr(resumable.decisions, "choose_checkpoint_steps",
                            lambda seconds, steps_per_epoch, forced=forced: (forced, f"forced: {forced}"))
        with runtime.scope():
            model = _model(keras)
        history = runtime.fit(model, x, y, batch_size=16, epochs=2, verbose=0,
                              checkpoint_dir=tmp_path / str(forced)).history
        trained.append((model.get_weights(), history))
    (within, within_history), (at_ends, at_ends_history) = trained
    for a, b in zip(within, at_ends):
        np.testing.assert_array_equal(a, b)
    assert within_history == at_ends_history
    said = capsys.readouterr().err
    assert "at most 4, the steps between checkpoints" in said and "steps an execution: 25 " in said
    assert (tmp_path / "4" / "epoch-0001-step-00024").is_dir()  # checkpointed within epoch 2: the cadence differed
    assert not (tmp_path / "None" / "epoch-0001-step-00024").exists()
