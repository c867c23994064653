"""Every use of Keras's private code (`keras.src`, private attributes, call conventions), in one place.

Each function says which Keras behaviour it relies on; tests/backends/test_keras_internals.py asserts
each still exists and behaves so, one test per name, so a Keras upgrade that changes one fails a named
test instead of breaking acceltrain somewhere. Verified with Keras 3.15.1. Imported only after connect()
(it imports keras).
"""

import contextlib
import functools
import inspect

import keras


# --- Seeding ----------------------------------------------------------------------------------

def set_keras_seed(seed: int) -> None:
    """Seed Keras's own generators as keras.utils.set_random_seed does, without importing TensorFlow.

    Relies on: set_random_seed stores the seed in global_state under rng_utils.GLOBAL_RANDOM_SEED (read by
    rng_utils.get_random_seed), and drops the global SeedGenerator (seed_generator.GLOBAL_SEED_GENERATOR),
    so the next unseeded draw makes a new one from Python's `random`, which the caller seeds next.
    (set_random_seed itself also seeds TensorFlow when installed: seconds of start-up on JAX.)
    """
    from keras.src.backend.common import global_state
    from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR
    from keras.src.utils.rng_utils import GLOBAL_RANDOM_SEED

    global_state.set_global_attribute(GLOBAL_RANDOM_SEED, seed)
    global_state.set_global_attribute(GLOBAL_SEED_GENERATOR, None)


@contextlib.contextmanager
def keras_state_kept():
    """Inside, a model may be built and thrown away leaving no trace: on exit Keras's layer-name counters
    and global seed generator, and Python's and NumPy's random states, are as they were. So a probe build
    (Runtime.build measuring a model under jax.eval_shape) leaves the real build's layer names ("dense",
    not "dense_1") and random draws as a build without it would have them.

    Relies on: Keras keeps its auto-naming counters in global_state's "object_name_uids" and its global
    SeedGenerator under seed_generator.GLOBAL_SEED_GENERATOR.
    """
    import copy
    import random

    import numpy as np
    from keras.src.backend.common import global_state
    from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR

    names = copy.deepcopy(global_state.get_global_attribute("object_name_uids"))
    seed_generator = global_state.get_global_attribute(GLOBAL_SEED_GENERATOR)
    python_random, numpy_random = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        global_state.set_global_attribute("object_name_uids", names)
        global_state.set_global_attribute(GLOBAL_SEED_GENERATOR, seed_generator)
        random.setstate(python_random)
        np.random.set_state(numpy_random)


# --- The trainer classes: where fit/evaluate/predict of every model are -------------------------

def trainer_class(backend: str):
    """The class whose fit/evaluate/predict every keras.Model of `backend` runs.

    Relies on: keras.Model inherits its training loop from keras.src.backend.<backend>.trainer's
    JAXTrainer / TensorFlowTrainer, so patching it there changes every model's fit.
    """
    if backend == "jax":
        from keras.src.backend.jax.trainer import JAXTrainer

        return JAXTrainer
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    return TensorFlowTrainer


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


# --- Compiled functions -------------------------------------------------------------------------

def forget_compiled_functions(model) -> None:
    """Make Keras rebuild the model's train/test/predict functions at its next call (after a change of
    steps_per_execution or jit_compile).

    Relies on: Trainer.make_train_function (and test/predict) return the cached function when the
    attribute is not None; compile() resets them to None the same way.
    """
    model.train_function = model.test_function = model.predict_function = None


@contextlib.contextmanager
def gathering_predictions(model, gather):
    """Inside, each predict step's outputs pass through `gather` (numpy outputs of the whole global batch),
    so Keras's final np.concatenate reads host arrays even when a batch spans several processes.

    Relies on: JAXTrainer.predict calls self.make_predict_function(), which keeps an existing
    `model.predict_function`, then `batch_outputs, state = self.predict_function(state, iterator)`.
    """
    model.make_predict_function()
    step = model.predict_function

    def gathered_step(state, iterator):
        outputs, state = step(state, iterator)
        return gather(outputs), state

    model.predict_function = gathered_step
    try:
        yield
    finally:
        model.predict_function = step


# --- Callbacks ----------------------------------------------------------------------------------

def async_safe(callback_class):
    """Mark a Callback class safe to run from Keras's callback thread.

    Relies on: CallbackList._configure_async_dispatch dispatches batch-end callbacks on a thread pool when
    every callback has `async_safe = True`; any callback without it makes Keras wait on the host for each
    step's metrics.
    """
    callback_class.async_safe = True
    return callback_class


# --- Saving -------------------------------------------------------------------------------------

SAVING_METHODS = ("save", "save_weights")


@contextlib.contextmanager
def saving_replaced(replace):
    """Inside, keras.Model.save and save_weights are `replace(name, original)`; restored on exit.

    Relies on: every model's save/save_weights are keras.Model's (subclasses rarely override them).
    """
    with patched(keras.Model, SAVING_METHODS, replace):
        yield


# --- A failed call: the model as it was (acceltrain run reruns it plainly) ------------------------

def variable_values(model) -> list:
    """(variable, value) of every variable a call may touch, on JAX only: Keras's JAX trainer takes the
    values out of the variables for the call and puts them back at its end, so a call that raises leaves
    the model without them. Only references: nothing is copied.

    Relies on: a Keras Variable holds its array in `_value`, which the JAX trainer sets to None for the
    length of a fit/evaluate/predict call (and does not restore when the call raises).
    """
    import keras

    if keras.backend.backend() != "jax":
        return []
    optimizer = getattr(model, "optimizer", None)
    own = getattr(model, "variables", [])
    variables = {id(v): v for v in [*own, *(optimizer.variables if optimizer is not None else [])]}
    return [(v, v._value) for v in variables.values()]


def put_back_values(values) -> bool:
    """Put the values from before a failed call back; False when steps had run (the old values were handed
    over to the step and deleted, and the new ones were lost with the failure)."""
    if any(value is not None and getattr(value, "is_deleted", lambda: False)() for _, value in values):
        return False
    for variable, value in values:
        variable._value = value
    return True
