"""The one interception of Keras's fit/evaluate/predict, and the one assembly every call passes: no Keras here.

While any runtime is open, each call of the trainer class's fit/evaluate/predict (keras_internals.trainer_class)
passes LAYERS, outermost first, then Keras's own method. Each name in LAYERS is a slot, filled by the code it belongs
to while it applies (`layers(name=layer)`); an empty one is passed by. A layer is `layer(call, proceed)`: it reads
the Call and returns `proceed(call)`, `proceed(call.replace(...))`, or a result of its own. To add one: name its slot
in LAYERS at its place and fill it where it is made; no other layer changes. acceltrain's own calls (Runtime.fit,
evaluate and predict) pass the same LAYERS with the layers they name (`assemble`); a failed call's plain rerun calls
`keras_internals.keras_method(model, name)`, Keras's own, and passes no layer: nothing enters twice. `walking()` records the layers a call enters, in
order: what tests compare between a script's call and the library's.
"""

import contextlib
import dataclasses
import functools
import inspect


@contextlib.contextmanager
def patched(owner, names, wrap):
    """Inside, `owner.NAME` is `wrap(NAME, original)` for each name; the originals are restored on exit."""
    originals = {name: getattr(owner, name) for name in names}
    for name, method in originals.items():
        setattr(owner, name, functools.wraps(method)(wrap(name, method)))
    try:
        yield
    finally:
        for name, method in originals.items():
            setattr(owner, name, method)



# The layers a call passes, outermost first: the order is this list's. Every call passes them, a script's through the
# interception, Runtime's through assemble() (assembly.py's docstring draws each kind's walk).
LAYERS = (
    "ledger",         # the time ledger: the call's steps and evaluations booked (training/ledger_watch.py)
    "script_calls",   # acceltrain run: the script's calls counted; one that fails judged (commands/script_layers.py)
    "autopilot",      # the first fit weighed, laid out, verified; each fit's batch cut (assembly.FirstFits)
    "script_inputs",  # acceltrain run's door: tensors read, fit-time checks warned once, one device or not (commands/)
    "inputs",         # the inputs prepared, fit, evaluate and predict alike, whoever calls (assembly.Inputs)
    "trained",        # the runtime's own loop: Runtime.fit's, and run --checkpoint-dir's (assembly.Trained)
    "placement",      # every runtime: the model's own distribution, steps one at a time on CPUs (backend's, intercept())
)
SCRIPT_LAYERS = ("script_calls", "script_inputs")  # what only a script's own calls pass (acceltrain run)
# How a keras.callbacks.CallbackList is read and joined (keras_internals/callbacks.py: callbacks_in, callbacks_added,
# set there as it is imported, which connect() does), for Call.with_callback: no Keras here
CALLBACK_LISTS: dict = {}
CALLS = ("fit", "evaluate", "predict")
_layers = dict.fromkeys(LAYERS)  # the slots: a layer, or None where empty
_open: list = []  # a share per open runtime: the interception is installed while there is one
_installed = contextlib.ExitStack()
_opened = 0  # runtimes opened in this process, ever


@dataclasses.dataclass(frozen=True)
class Call:
    """One fit, evaluate or predict as it passes the layers."""

    name: str  # "fit" | "evaluate" | "predict"
    model: object
    args: tuple
    kwargs: dict
    keras: object  # Keras's own method, unbound: keras(model, *args, **kwargs)
    # Why an inner layer ran this call undistributed, on one device (shared by every replace(), so the outer
    # layers read it once the call returns: run's closing line says where each call ran).
    undistributed: list = dataclasses.field(default_factory=list)
    prepared: object = None  # the inputs as layer "inputs" prepared them (inputs.Fit): the runtime's own loop's

    def replace(self, **changes) -> "Call":
        return dataclasses.replace(self, **changes)

    def arguments(self) -> dict:
        """The arguments by Keras's names (x, y, batch_size ...): bound_arguments."""
        return bound_arguments(self.keras, self.model, self.args, self.kwargs)

    def takes_callbacks(self) -> bool:
        """Whether acceltrain's callbacks can join the call's (with_callback): not where they came by position or in a
        subclass of keras.callbacks.CallbackList."""
        names = list(inspect.signature(self.keras).parameters)[1:]  # less the model
        if "callbacks" not in names or len(self.args) > names.index("callbacks"):
            return False
        callbacks = self.kwargs.get("callbacks")
        return callbacks is None or isinstance(callbacks, (list, tuple)) or type(callbacks).__name__ == "CallbackList" \
            and type(callbacks).__module__.startswith("keras.")

    def with_callback(self, callback) -> "Call":
        """The call with `callback` first among its callbacks (so it sees an epoch's end before the script's
        callbacks run theirs), in a keras.callbacks.CallbackList the caller built too (a new one over the same
        callbacks: keras_internals.callbacks_added). Left as it is where the callbacks came by position or in a
        subclass of CallbackList (its own methods stand), or already hold a callback of the same class.

        Relies on: fit/evaluate/predict take `callbacks` as a list or a CallbackList.
        """
        if not self.takes_callbacks():
            return self
        callbacks = self.kwargs.get("callbacks")
        if callbacks is None or isinstance(callbacks, (list, tuple)):
            given = list(callbacks or ())
            added = [callback, *given]
        else:  # a keras.callbacks.CallbackList: keras_internals is loaded (connect() imports it)
            given = CALLBACK_LISTS["read"](callbacks)
            added = CALLBACK_LISTS["add"](callbacks, self.model, first=[callback])
        if added is None or any(type(c) is type(callback) for c in given):
            return self
        return self.replace(kwargs={**self.kwargs, "callbacks": added})


def intercept(trainer, placement, autopilot=None, also=()):
    """Runtime(): the first open runtime installs the interception on the `trainer` class (keras_internals.
    trainer_class: the backend's), `placement` and `autopilot` in their slots (`acceltrain run` puts its own autopilot
    there while a script runs), and enters each of `also` (context managers' factories) until the last closes. Returns
    the runtime's close (True the first time only); the last closed gives Keras its methods back."""
    global _opened
    if not _open:
        _installed.enter_context(patched(trainer, CALLS, _intercepted))
        for context in also:
            _installed.enter_context(context())
        _layers["placement"], _layers["autopilot"] = placement, autopilot
    _opened += 1
    share = object()
    _open.append(share)

    def close() -> bool:
        if share not in _open:
            return False
        _open.remove(share)
        if not _open:
            _installed.close()
            _layers["placement"] = _layers["autopilot"] = None
        return True

    return close


def runtimes_open() -> int:
    """How many runtimes are open now: the interception is installed while there is one."""
    return len(_open)


def runtimes_opened() -> int:
    """How many runtimes this process has opened (connect()), closed or not."""
    return _opened


def _intercepted(name: str, keras_own):
    def method(model, *args, **kwargs):
        if kwargs.get("_use_cached_eval_dataset"):  # Keras's fit validating, inside a call past the layers
            return keras_own(model, *args, **kwargs)  # Relies on: fit calls evaluate(..., _use_cached_eval_dataset=True)
        return _through([(slot, _layers[slot]) for slot in LAYERS if _layers[slot] is not None],
                        Call(name, model, args, kwargs, keras_own))

    return method


def assemble(call: Call, **filled):
    """`call` through the slots of LAYERS given here (not the interception's: acceltrain's own calls, such as
    Runtime.fit's, pass the layers they name, in LAYERS's order), then Keras's own method."""
    _check_slots(filled)
    return _through([(slot, filled[slot]) for slot in LAYERS if filled.get(slot) is not None], call)


def _through(layers, call: Call):
    if not layers:
        return call.keras(call.model, *call.args, **call.kwargs)
    (slot, layer), below = layers[0], layers[1:]
    for walk in _walks:
        walk.append((slot, _named(layer)))
    return layer(call, lambda passed: _through(below, passed))


_walks: list = []  # the walks being recorded (walking())


@contextlib.contextmanager
def walking():
    """Inside, each layer a call enters is appended to the list yielded, as (slot, the layer's function or class by
    its qualified name), in the order entered: the walk of a fit (tests compare Runtime.fit's with a script's)."""
    walk = []
    _walks.append(walk)
    try:
        yield walk
    finally:
        _walks.remove(walk)


def _named(layer) -> str:
    own = layer if inspect.isfunction(layer) or inspect.ismethod(layer) else type(layer)
    return f"{own.__module__}.{own.__qualname__}"


def _check_slots(filled) -> None:
    unknown = sorted(set(filled) - set(LAYERS))
    if unknown:
        raise ValueError(f"Received layers {unknown}: no such slot. Name each in interception.LAYERS, at its place.")


@contextlib.contextmanager
def layers(**filled):
    """Inside, the named slots of LAYERS hold these layers (None: left empty); as they were on exit."""
    _check_slots(filled)
    before = {slot: _layers[slot] for slot in filled}
    _layers.update(filled)
    try:
        yield
    finally:
        _layers.update(before)


def bound_arguments(method, model, args, kwargs) -> dict:
    """The arguments of a call `method(model, *args, **kwargs)` by name, as Keras's signature names them
    (x, y, batch_size ...), a `**kwargs` catch-all (evaluate's) merged in. The model itself left out.

    Relies on: Model.fit/evaluate/predict take x first and the rest by the names Keras documents.
    """
    bound = inspect.signature(method).bind(model, *args, **kwargs)
    arguments = dict(bound.arguments)
    del arguments[next(iter(arguments))]  # the model itself
    arguments.update(arguments.pop("kwargs", {}))
    return arguments
