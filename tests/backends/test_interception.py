"""The one interception and the one assembly (backends/interception.py): the layers a call passes, in LAYERS's order,
and what of Keras's calling conventions they rely on."""

import numpy as np
import pytest

from acceltrain.backends import interception, keras_internals


def _model():
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    return model


def test_patched_restores_the_originals():
    class Owner:
        def method(self):
            return "original"

    with interception.patched(Owner, ("method",), lambda name, method: lambda self: "patched " + method(self)):
        assert Owner().method() == "patched original"
    assert Owner().method() == "original"


def test_bound_arguments_names_fit_evaluate_and_predict_arguments():
    import keras

    model = _model()
    x = np.zeros((4, 3), "float32")
    fit = interception.bound_arguments(keras.Model.fit, model, (x, x[:, :2], 2), {"epochs": 3})
    assert fit == {"x": x, "y": fit["y"], "batch_size": 2, "epochs": 3}
    evaluate = interception.bound_arguments(keras.Model.evaluate, model, (x,), {"return_dict": True})
    assert set(evaluate) == {"x", "return_dict"}
    predict = interception.bound_arguments(keras.Model.predict, model, (x, 4), {})
    assert set(predict) == {"x", "batch_size"}


# --- The one interception (the session's runtime has it installed) ----------------------------------

def _recording(name, seen):
    def layer(call, proceed):
        seen.append((name, call.name))
        return proceed(call)

    return layer


def test_a_call_passes_the_layers_in_their_order_and_keras_method_passes_none(runtime):
    model, seen = _model(), []
    x = np.zeros((8, 3), "float32")
    with interception.layers(script_inputs=_recording("script_inputs", seen),
                                script_calls=_recording("script_calls", seen), ledger=_recording("ledger", seen)):
        model.predict(x, verbose=0)
        keras_internals.keras_method(model, "predict")(x, verbose=0)  # acceltrain's own call
    model.predict(x, verbose=0)  # the slots are empty again

    # LAYERS's order, not the given one: the ledger first
    assert seen == [("ledger", "predict"), ("script_calls", "predict"), ("script_inputs", "predict")]
    with pytest.raises(ValueError, match=r"Received layers \['timing'\]: no such slot"):
        with interception.layers(timing=_recording("timing", seen)):
            pass


def test_kerass_fit_validates_through_evaluate_with_use_cached_eval_dataset(runtime):
    """Why a validation inside fit passes no layer: Keras's fit calls self.evaluate(..., _use_cached_eval_dataset=True)."""
    import keras

    seen, evaluated = [], []

    class Recording(keras.Sequential):
        def evaluate(self, *args, **kwargs):
            evaluated.append(kwargs.get("_use_cached_eval_dataset"))
            return super().evaluate(*args, **kwargs)

    model = Recording([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    x = np.zeros((16, 3), "float32")
    with interception.layers(script_calls=_recording("script_calls", seen)):
        model.fit(x, x[:, :2], validation_data=(x, x[:, :2]), batch_size=8, epochs=1, verbose=0)
    assert evaluated == [True] and seen == [("script_calls", "fit")]


@pytest.mark.parametrize("args, kwargs, expected", [
    ((), {}, ["Marker"]),
    ((), {"callbacks": None}, ["Marker"]),
    ((), {"callbacks": ["mine"]}, ["Marker", "mine"]),  # first: it sees each epoch end before the script's
    ((), {"callbacks": ["Marker"]}, ["Marker"]),  # one is enough
    ((1, 2, 3, 4, 5, ["mine"]), {}, None),  # callbacks given by position: left alone
    ((), {"callbacks": "a CallbackList"}, "a CallbackList"),
])
def test_call_with_callback_adds_once_where_it_can(args, kwargs, expected):
    class Marker:
        pass

    def fit(model, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None):
        pass

    if kwargs.get("callbacks") == ["Marker"]:
        kwargs = {"callbacks": [Marker()]}
    call = interception.Call("fit", None, args, kwargs, fit).with_callback(Marker())
    got = call.kwargs.get("callbacks")
    if isinstance(got, list):
        got = [c if isinstance(c, str) else type(c).__name__ for c in got]
    assert got == expected


def test_call_with_callback_joins_a_callback_list_the_caller_built_but_not_a_subclass_of_it():
    """Under launch, a fit given a keras.callbacks.CallbackList kept Keras's host input path while the device-data line
    said yes (issue 45): acceltrain's callbacks (the runner of steps among them) were left out of it. Now they join it:
    a new CallbackList over the caller's callbacks (its History too), acceltrain's first, its model and parameters kept,
    a subclass of CallbackList keeps its own methods, untouched."""
    import keras

    class Marker(keras.callbacks.Callback):
        pass

    def fit(model, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None):
        pass

    model, mine = _model(), keras.callbacks.LambdaCallback()
    given = keras.callbacks.CallbackList([mine], add_history=True, model=model, epochs=3)
    called = interception.Call("fit", model, (), {"callbacks": given}, fit)
    assert called.takes_callbacks()
    joined = called.with_callback(Marker()).kwargs["callbacks"]
    assert isinstance(joined, keras.callbacks.CallbackList) and joined is not given
    assert [type(c).__name__ for c in joined.callbacks] == ["Marker", "LambdaCallback", "History"]
    assert joined.callbacks[0].model is model and joined.callbacks[0].params == {"epochs": 3} == joined.params
    assert given.callbacks == [mine, given.callbacks[1]]  # the caller's own list is not changed
    assert keras_internals.callbacks_in(joined) == joined.callbacks

    class OwnList(keras.callbacks.CallbackList):
        pass

    own = called.replace(kwargs={"callbacks": OwnList([mine], model=model)})
    assert not own.takes_callbacks() and own.with_callback(Marker()) is own


def test_assemble_passes_the_given_layers_in_the_order_of_layers_and_walking_records_them(runtime):
    """acceltrain's own fits (Runtime.fit) name their layers; the interception's slots are not consulted."""
    model, seen = _model(), []
    x = np.zeros((8, 3), "float32")
    call = interception.Call("predict", model, (x,), {"verbose": 0}, keras_internals.keras_own("predict"))
    with interception.layers(script_calls=_recording("script_calls", seen)), interception.walking() as walk:
        interception.assemble(call, placement=_recording("placement", seen), ledger=_recording("ledger", seen))
    assert seen == [("ledger", "predict"), ("placement", "predict")]
    assert [slot for slot, _ in walk] == ["ledger", "placement"]
    assert walk[0][1] == "tests.backends.test_interception._recording.<locals>.layer"
    with pytest.raises(ValueError, match=r"Received layers \['timing'\]: no such slot"):
        interception.assemble(call, timing=_recording("timing", seen))
