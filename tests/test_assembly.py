"""The one assembly of a fit (assembly.py over interception.LAYERS): every fit walks the same layers in
the same order, the accumulation cut and the batch arithmetic are made once."""

import json

import numpy as np
import pytest

from acceltrain.backends import interception
from acceltrain import assembly
from tests import support

WALKER = support.SCRIPTS / "walks_its_fits.py"


def _model():
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy")
    return model


def _data():
    return np.random.default_rng(0).random((64, 4), dtype=np.float32), np.arange(64) % 2


def _runtime_fit_walk(runtime, **options) -> list:
    with runtime.scope():
        model = _model()
    with interception.walking() as walk:
        runtime.fit(model, *_data(), batch_size=16, epochs=2, verbose=0, **options)
    return [list(step) for step in walk]


def _without_the_scripts_own(walk) -> list:
    return [step for step in walk if step[0] not in interception.SCRIPT_LAYERS]


FIRST_FITS, TRAINED = "acceltrain.assembly.FirstFits", "acceltrain.assembly.Trained"
LEDGER, PLACEMENT = "acceltrain.training.ledger_watch.layer.<locals>.ledger", "acceltrain.backends.jax.op_by_op.follow_placement"


def test_runtime_fit_walks_the_assembly_in_the_order_of_layers(runtime, tmp_path):
    """Runtime.fit passes the same ordered layers as a script's calls (it passed none before: it assembled its fit by
    itself); with checkpoints, each epoch's Keras fit passes the placement layer (one an epoch)."""
    expected = [["ledger", LEDGER], ["autopilot", FIRST_FITS], ["trained", TRAINED]]
    assert _runtime_fit_walk(runtime) == [*expected, ["placement", PLACEMENT]]
    assert _runtime_fit_walk(runtime, checkpoint_dir=tmp_path / "c") == [*expected, *[["placement", PLACEMENT]] * 2]
    assert [slot for slot, _ in expected] == [s for s in interception.LAYERS if s in dict(expected)]


def test_a_librarys_plain_fit_walks_the_runtimes_first_fits_then_placement(runtime):
    """model.fit on a model built in the runtime's scope: the interception's autopilot slot (the open runtime's
    FirstFits, found by _plain_first_fits) and the placement layer; nothing of Runtime.fit's own loop."""
    with runtime.scope():
        model = _model()
    with interception.walking() as walk:
        model.fit(*_data(), batch_size=16, epochs=1, verbose=0)
    assert [list(step) for step in walk] == [["autopilot", "acceltrain.runtime._plain_first_fits"],
                                             ["placement", PLACEMENT]]


@pytest.mark.multi_device
def test_a_scripts_fit_under_run_checkpoint_dir_walks_as_runtime_fit_with_checkpoint_dir(runtime, tmp_path):
    """Issue 36: a walk of Runtime.fit(checkpoint_dir=...) and of a script's fit under `run --checkpoint-dir` pass the
    same functions in the same order, less the two layers only a script's calls have (its calls counted; its inputs,
    which pass a fit the runtime's loop trains). Each of the script's fits keeps its checkpoints in DIR/fit-N, and its
    callback sees each epoch."""
    run = support.run_cli("run", "--simulate-devices", "8", "--checkpoint-dir", tmp_path / "c", "--checkpoint-every",
                          "1 epochs", WALKER, timeout=300)
    assert run.returncode == 0, run.stderr
    walks = [json.loads(line.removeprefix("walk: ")) for line in run.stdout.splitlines() if line.startswith("walk: ")]
    assert [line for line in run.stdout.splitlines() if line.startswith("epochs seen")] == ["epochs seen: 2",
                                                                                           "epochs seen: 1"]
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["fit-1", "fit-2"]

    assert [slot for slot, _ in walks[0]] == ["ledger", "script_calls", "autopilot", "script_inputs", "trained",
                                              "placement", "placement"]
    assert _without_the_scripts_own(walks[0]) == _runtime_fit_walk(runtime, checkpoint_dir=tmp_path / "r")


@pytest.mark.parametrize("arguments, accumulation, expected", [
    ({"x": "X", "batch_size": 64}, 1, {"x": "X", "batch_size": 64}),
    ({"x": "X", "batch_size": 64}, 4, {"x": "X", "batch_size": 16}),
    ({"x": "X"}, 2, {"x": "X", "batch_size": 16}),  # Keras's default 32, cut
    ({"x": "X", "batch_size": 64, "steps_per_epoch": 10}, 2, {"x": "X", "batch_size": 32, "steps_per_epoch": 20}),
])
def test_the_accumulation_cut_keeps_the_global_batch_and_the_updates_an_epoch(arguments, accumulation, expected):
    assert assembly.cut_for_accumulation(arguments, accumulation) == expected


def test_a_checkpointed_runtime_fit_refuses_what_exact_resume_cannot_honour_naming_the_argument(runtime, tmp_path):
    from acceltrain.errors import UsageError

    with runtime.scope():
        model = _model()
    with pytest.raises(UsageError) as refused:
        runtime.fit(model, *_data(), batch_size=16, epochs=1, verbose=0, steps_per_epoch=2, checkpoint_dir=tmp_path)
    assert str(refused.value).startswith("Received Runtime.fit(steps_per_epoch=2) with checkpoint_dir, which cannot "
                                         "resume it exactly")
    assert "Leave out checkpoint_dir" in str(refused.value) and not any(tmp_path.iterdir())
