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
INPUTS = "acceltrain.assembly.Inputs"
LEDGER, PLACEMENT = "acceltrain.training.ledger_watch.layer.<locals>.ledger", "acceltrain.backends.jax.op_by_op.follow_placement"


def test_runtime_fit_walks_the_assembly_in_the_order_of_layers(runtime, tmp_path):
    """Runtime.fit passes the same ordered layers as a script's calls (it passed none before: it assembled its fit by
    itself); with checkpoints, each epoch's Keras fit passes the placement layer (one an epoch)."""
    expected = [["ledger", LEDGER], ["autopilot", FIRST_FITS], ["inputs", INPUTS], ["trained", TRAINED]]
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
def test_a_scripts_calls_under_run_checkpoint_dir_walk_as_runtimes_calls(runtime, tmp_path):
    """Issue 36: a walk of Runtime.fit(checkpoint_dir=...) and of a script's fit under `run --checkpoint-dir` pass the
    same functions in the same order, less the two layers only a script's calls have (its calls counted; its door,
    which passes a fit the runtime's loop trains); so do Runtime.evaluate/predict and the script's evaluate/predict. Each of the script's fits keeps its checkpoints in DIR/fit-N, and its
    callback sees each epoch."""
    run = support.run_cli("run", "--simulate-devices", "8", "--checkpoint-dir", tmp_path / "c", "--checkpoint-every",
                          "1 epochs", WALKER, timeout=300)
    assert run.returncode == 0, run.stderr
    walks = [json.loads(line.removeprefix("walk: ")) for line in run.stdout.splitlines() if line.startswith("walk: ")]
    assert [line for line in run.stdout.splitlines() if line.startswith("epochs seen")] == ["epochs seen: 2",
                                                                                           "epochs seen: 1"]
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["fit-1", "fit-2"]

    assert [slot for slot, _ in walks[0]] == ["ledger", "script_calls", "autopilot", "script_inputs", "inputs",
                                              "trained", "placement", "placement"]
    assert _without_the_scripts_own(walks[0]) == _runtime_fit_walk(runtime, checkpoint_dir=tmp_path / "r")

    # Issue 42: Runtime.evaluate and predict meet a script's evaluate and predict at the same layers, in the same
    # order (they passed the placement layer alone before, their inputs prepared beside the assembly).
    called = {name: json.loads(line.removeprefix(f"{name} walk: ")) for line in run.stdout.splitlines()
              for name in ("evaluate", "predict") if line.startswith(f"{name} walk: ")}
    with runtime.scope():
        model = _model()
    x, y = _data()
    for name, call in [("evaluate", lambda: runtime.evaluate(model, x, y, batch_size=16, verbose=0)),
                       ("predict", lambda: runtime.predict(model, x, batch_size=16, verbose=0))]:
        with interception.walking() as walk:
            call()
        assert [slot for slot, _ in called[name]] == ["ledger", "script_calls", "autopilot", "script_inputs",
                                                      "inputs", "trained", "placement"], name
        assert _without_the_scripts_own(called[name]) == [list(step) for step in walk], name


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


def test_each_of_acceltrains_callbacks_is_made_in_one_place_and_each_call_carries_one(runtime, monkeypatch):
    """Issue 42: each callback acceltrain puts in a call is made by one layer (it was made by two and deduplicated by
    class): in the source, one construction each (the steps one at a time: one call of the backend's step_callbacks;
    the ledger asks steps_one_at_a_time); in the callbacks Keras's own fit and evaluate receive from Runtime's
    calls on 8 CPU devices, one each (the steps one at a time: the placement layer's)."""
    import ast
    import functools
    from collections import Counter
    from pathlib import Path

    import acceltrain
    from acceltrain.backends import keras_internals

    made = Counter()
    for path in Path(acceltrain.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            called = getattr(node.func, "id", None) or getattr(node.func, "attr", None) \
                if isinstance(node, ast.Call) else None
            if called in ("StallWatch", "LedgerWatch", "DivergenceCheck", "step_callbacks"):
                made[called] += 1
    assert made == {"StallWatch": 1, "LedgerWatch": 1, "DivergenceCheck": 1, "step_callbacks": 1}

    carried, keras_own = [], keras_internals.keras_own

    def recording(name):
        method = keras_own(name)

        @functools.wraps(method)
        def keras(model, *args, **kwargs):
            counts = Counter(type(c).__name__ for c in kwargs.get("callbacks") or ())
            carried.append((name, {kind: counts[kind] for kind in ("StallWatch", "LedgerWatch", "OneStepAtATime")}))
            return method(model, *args, **kwargs)

        return keras

    monkeypatch.setattr(keras_internals, "keras_own", recording)
    with runtime.scope():
        model = _model()
    runtime.fit(model, *_data(), batch_size=16, epochs=1, verbose=0)
    runtime.evaluate(model, *_data(), batch_size=16, verbose=0)
    ledger = int(runtime.ledger_layer is not None)  # evaluate's time is booked by the ledger layer itself
    assert carried == [("fit", {"StallWatch": 1, "LedgerWatch": ledger, "OneStepAtATime": 1}),
                       ("evaluate", {"StallWatch": 1, "LedgerWatch": 0, "OneStepAtATime": 1})]
