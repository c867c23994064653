"""Every use of Keras's private code (`keras.src`, private attributes, call conventions), in one place.

Each function says which Keras behaviour it relies on; tests/backends/test_keras_internals.py asserts
each still exists and behaves so, one test per name, so a Keras upgrade that changes one fails a named
test instead of breaking acceltrain somewhere. Verified with Keras 3.15.1. Imported only after connect()
(it imports keras).

The doors into Keras are here too, each one wrapper deep: the trainer class (`trainer_class`, where
interception.py installs the one interception of fit/evaluate/predict and its LAYERS), each model's train function
(TRAIN_FUNCTION_HOOKS), Model.save/save_weights (`saving_replaced`), keras.config.set_backend
(`set_backend_replaced`) and keras.backend.clear_session (`clear_session_replaced`). `keras_method(model, name)` is
Keras's own fit/evaluate/predict, passing no layer. A recipe's model (commands/train.py) also gets its optimizer's
build and its metrics' results replaced on its own instances.
"""

import contextlib
import functools

import keras

from acceltrain.backends.interception import patched, runtimes_open


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
    JAXTrainer / TensorFlowTrainer (keras-nightly 3.16: renamed Trainer in both), so patching it there changes every
    model's fit.
    """
    import importlib

    module = importlib.import_module(f"keras.src.backend.{backend}.trainer")
    own = {"jax": "JAXTrainer", "tensorflow": "TensorFlowTrainer"}[backend]
    return getattr(module, own, None) or module.Trainer


def keras_method(model, name: str):
    """Keras's own fit/evaluate/predict of `model`, bound, passing no layer: what acceltrain's own code calls.
    (The trainer's: a subclass's own `fit` is the script's way in, which has passed the layers already.)"""
    return functools.partial(keras_own(name), model)


def keras_own(name: str):
    """Keras's own fit/evaluate/predict, unbound (the trainer class's, under the interception): a Call's `keras`."""
    method = getattr(trainer_class(keras.backend.backend()), name)
    return method.__wrapped__ if runtimes_open() else method  # the interception wraps Keras's own


# --- Compiled functions -------------------------------------------------------------------------

def forget_compiled_functions(model) -> None:
    """Make Keras rebuild the model's train/test/predict functions at its next call (after a change of
    steps_per_execution or jit_compile).

    Relies on: Trainer.make_train_function (and test/predict) return the cached function when the
    attribute is not None; compile() resets them to None the same way.
    """
    model.train_function = model.test_function = model.predict_function = None


@contextlib.contextmanager
def functions_made_anew(model):
    """Inside, Keras makes the model's train/test/predict functions again at its next call (a call on one device: one
    compiled under a distribution puts its state out by that distribution's layouts, and refuses state on one
    device); on exit the ones it had are back, not compiled again.

    Relies on: what forget_compiled_functions relies on; a function Keras made takes the variables' values as its
    state argument (it holds none of them), so one kept aside runs again on the values laid out as before.
    """
    kept = model.train_function, model.test_function, model.predict_function
    forget_compiled_functions(model)
    try:
        yield
    finally:
        model.train_function, model.test_function, model.predict_function = kept


def compiled_functions(model) -> tuple:
    """The model's Keras-made train and test functions (under acceltrain's train-function door): new objects once Keras
    makes them again (after compile(), or forget_compiled_functions).

    Relies on: Trainer keeps them in `train_function` / `test_function`, None until made.
    """
    function = getattr(model, "train_function", None)
    while isinstance(function, _TrainFunctionDoor):
        function = function.__wrapped__
    return function, getattr(model, "test_function", None)


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


# --- The time ledger's view of a fit (training/ledger_watch.py) ------------------------------------

# The one door into a model's train function: acceltrain's hooks on the batches it pulls, outermost first. Each
# name is a slot a hook fills while it applies (watch_train_steps, keep_last_batch); one wrapper holds them all, so
# no two wrappers ever stack on a model's train function (two stacked once broke the ledger's FLOPs count).
TRAIN_FUNCTION_HOOKS = (
    "ledger",      # the time ledger: each next() timed (training/ledger_watch.py)
    "last_batch",  # the batch the step took, kept: the step timed again on one device (backends/jax.py)
)


class _TrainFunctionDoor:
    """A model's train function with acceltrain's hooks: each execution's iterator passes the filled hooks in
    TRAIN_FUNCTION_HOOKS's order, then Keras's own train function (`__wrapped__`) takes it, or, while a fit runs
    many steps a dispatch (`runs`: backends/jax/resident.py), the runner does, Keras's own function in hand."""

    def __init__(self, own):
        self.__wrapped__ = own
        self.hooks = {}  # slot -> wrap_iterator(state, iterator)
        self.runs = None  # run(state, iterator, keras_own) -> (logs, state), or None: Keras's own function

    def __call__(self, state, iterator):
        for slot in TRAIN_FUNCTION_HOOKS:
            if slot in self.hooks:
                iterator = self.hooks[slot](state, iterator)
        if self.runs is not None:
            return self.runs(state, iterator, self.__wrapped__)
        return self.__wrapped__(state, iterator)


def _hook_train_function(model, slot: str, wrap_iterator) -> None:
    """`wrap_iterator` in `slot` of the model's train function's one door (made on the function Keras made now:
    a function rebuilt since, after a recompile, gets a new door)."""
    door = model.train_function
    if not isinstance(door, _TrainFunctionDoor):
        door = model.train_function = _TrainFunctionDoor(door)
    door.hooks[slot] = wrap_iterator


def _unhook_train_function(model, slot: str, wrap_iterator=None) -> None:
    """`slot` emptied (only while it holds `wrap_iterator`, where given); the last hook out gives Keras's own back."""
    door = getattr(model, "train_function", None)
    if not isinstance(door, _TrainFunctionDoor) or slot not in door.hooks:
        return
    if wrap_iterator is None or door.hooks[slot] is wrap_iterator:
        del door.hooks[slot]
    if not door.hooks and door.runs is None:
        model.train_function = door.__wrapped__


def run_train_executions(model, run) -> bool:
    """From now on each execution of the model's train function is `run(state, iterator, keras_own)` (after the
    hooks of TRAIN_FUNCTION_HOOKS have wrapped the iterator), until `stop_running_train_executions`. False where it
    cannot: TensorFlow, or no train function made yet.

    Relies on: JAXTrainer.fit calls make_train_function() (public, kept while `train_function` is set) and then, for
    each execution of `steps_per_execution` steps, `logs, state = self.train_function(state, iterator)`; the
    EpochIterator steps by `steps_per_execution` whatever the function pulls from the iterator.
    """
    if keras.backend.backend() != "jax":
        return False
    model.make_train_function()
    door = model.train_function
    if not isinstance(door, _TrainFunctionDoor):
        door = model.train_function = _TrainFunctionDoor(door)
    door.runs = run
    return True


def stop_running_train_executions(model) -> None:
    door = getattr(model, "train_function", None)
    if isinstance(door, _TrainFunctionDoor):
        door.runs = None
        if not door.hooks:
            model.train_function = door.__wrapped__


def train_function_wrappers(model) -> int:
    """How many of acceltrain's wrappers stand over the model's train function (at most one: its door)."""
    function, count = getattr(model, "train_function", None), 0
    while isinstance(function, _TrainFunctionDoor):
        function, count = function.__wrapped__, count + 1
    return count


def watch_train_steps(model, wrap_iterator) -> bool:
    """Inside this fit, each call of the model's train function pulls its batches through
    `wrap_iterator(state, iterator)` (the ledger times each `next()`): slot "ledger" of its one door. Returns False
    where it cannot (TensorFlow: the step takes its input inside the graph; a model not compiled for a fit yet).
    `unwatch_train_steps` undoes it.

    Relies on: JAXTrainer.fit calls make_train_function() before the callbacks' on_train_begin and on_epoch_begin,
    and make_train_function keeps an existing `model.train_function`; then each execution is
    `logs, state = self.train_function(state, iterator)`, whose steps pull their batches with next(iterator)
    inside it (Trainer._make_function's iterator_step).
    """
    if keras.backend.backend() != "jax" or model.train_function is None:
        return False
    _hook_train_function(model, "ledger", wrap_iterator)
    return True


def unwatch_train_steps(model) -> None:
    _unhook_train_function(model, "ledger")


def watch_evaluation_batches(model, kind: str, on_batch):
    """Inside an evaluation (`kind` "test": fit's validation and evaluate; "predict"), each batch the model's
    function pulls is passed to `on_batch(batch)` (the ledger counts its samples). Returns the function that undoes
    it, or None where it cannot (TensorFlow: the step takes its input inside the graph; no function made yet).

    Relies on: JAXTrainer.evaluate/predict call make_test_function()/make_predict_function() (which keep an existing
    `test_function`/`predict_function`) before the callbacks' on_test_begin/on_predict_begin, then call
    `function(state, iterator)` once an execution, the function pulling its batches with next(iterator).
    """
    name = f"{kind}_function"
    function = getattr(model, name, None)
    if keras.backend.backend() != "jax" or function is None:
        return None

    def counted(state, iterator):
        return function(state, map(lambda batch: on_batch(batch) or batch, iterator))

    setattr(model, name, counted)

    def undo():
        if getattr(model, name, None) is counted:
            setattr(model, name, function)

    return undo


def test_states_through(model, through):
    """From now on until the undo returned, each call of the model's test function (fit's validation and evaluate)
    takes its state through `through(state)` first. Returns the undo, or None where it cannot (TensorFlow; a model
    not compiled).

    Relies on: JAXTrainer.evaluate (fit's validation too) calls make_test_function(), which keeps an existing
    `test_function`, then `logs, state = self.test_function(state, iterator)` once an execution, `state` the
    (trainable, non-trainable, metrics) variables' values.
    """
    if keras.backend.backend() != "jax" or not model.compiled:
        return None
    model.make_test_function()
    function = model.test_function

    def through_first(state, iterator):
        return function(through(state), iterator)

    model.test_function = through_first

    def undo():
        if getattr(model, "test_function", None) is through_first:
            model.test_function = function

    return undo


def _keras_own(function):
    """Keras's train function under acceltrain's door."""
    while isinstance(function, _TrainFunctionDoor):
        function = function.__wrapped__
    return function


def keras_train_function(model):
    """The model's train function as Keras made it (None before its first fit): what is compiled, whoever hooks it."""
    function = getattr(model, "train_function", None)
    return None if function is None else _keras_own(function)


def jitted_train_step(model):
    """The jitted train step inside the model's train function (JAX), or None: what the ledger lowers for the
    step's FLOPs, so the count is of the program Keras compiled.

    Relies on: JAXTrainer.make_train_function sets `train_function = self._make_function(jit(train_step))`, a
    closure (iterator_step) whose free variable `step_function` is the jitted step (a jax PjitFunction).
    """
    function = getattr(model, "train_function", None)
    if function is None:
        return None
    function = _keras_own(function)
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    cells = dict(zip(code.co_freevars, function.__closure__ or ()))
    step = cells.get("step_function")
    step = step.cell_contents if step is not None else None
    return step if hasattr(step, "lower") else None


# --- A model's first fit, prepared ahead (layout/autopilot.py, layout/verify.py) ----------------

def set_layout(variable, layout, value=None) -> None:
    """Give a built variable a new layout (and its value, already laid out so), as if it had been created under it.

    Relies on: a Keras variable keeps its TensorLayout in `_layout`: an optimizer slot created from it later takes
    that layout (BaseOptimizer.add_variable_from_reference passes layout=reference._layout), and a value assigned
    to it is laid out by it (JaxVariable._direct_assign); its array is `_value`.
    """
    variable._layout = layout
    if value is not None:
        variable._value = value


@contextlib.contextmanager
def stand_ins(model, optimizer, data_batch):
    """Inside, the model trains its steps with `optimizer` in place of its own, a compiled loss of its own built for
    `data_batch` ((x, y) of arrays, or of ShapeDtypeStructs) and no compiled metrics, so that a step can be traced,
    compiled or run ahead of fit (statelessly: `model.train_step(state, data)`) while the model's own optimizer,
    loss and metrics stay as fit will find them: unbuilt where they were, so fit builds them, and reads its first
    batch to do so, as it would have (that read draws the first shuffle of its inputs: skipped, it would change the
    order of every epoch after). The model's own layers must be built.

    Relies on: Trainer.compile keeps the compiled loss in `_compile_loss` (a compile_utils.CompileLoss of the
    user's loss and loss weights, with its own per-output Mean trackers once built) and the metrics in
    `_compile_metrics`, set past Layer.__setattr__'s tracking (which would add a Metric to the model's own metrics);
    Trainer.metrics (hence metrics_variables) reads them at each call; train_step and
    compute_loss read them, and `optimizer`, when traced; Trainer._symbolic_build reads the first batch only while
    one of them is unbuilt.
    """
    from keras.src import backend
    from keras.src.trainers.compile_utils import CompileLoss

    own = (model.optimizer, model._compile_loss, model._compile_metrics)
    loss = own[1]
    if loss is not None:
        loss = CompileLoss(loss._user_loss, loss._user_loss_weights, reduction=loss.reduction,
                           output_names=loss.output_names)
    x, y = (keras.tree.map_structure(lambda a: None if a is None else backend.KerasTensor(a.shape, a.dtype), part)
            for part in data_batch)

    def put(values):  # object.__setattr__: a Metric set through Layer.__setattr__ would be tracked into its metrics
        for name, value in zip(("optimizer", "_compile_loss", "_compile_metrics"), values):
            object.__setattr__(model, name, value)

    put((optimizer, loss, None))
    try:
        if loss is not None:
            y_pred = backend.compute_output_spec(model, x, training=False)
            backend.compute_output_spec(loss, y, y_pred)  # builds its structure and trackers, nothing else
        yield
    finally:
        put(own)


def uses_keras_train_step(model) -> bool:
    """The model trains with Keras's own train_step (not its own), whose optimizer is `model.optimizer`.

    Relies on: the trainer class defines train_step; a subclass that overrides it may use other optimizers
    (a GAN's two), which a step traced with another optimizer in model.optimizer would not see.
    """
    return type(model).train_step is trainer_class(keras.backend.backend()).train_step


def slot_references(optimizer, trainable_variables) -> dict:
    """{id(slot): its weight} for the optimizer's per-weight variables (Adam's momentum and velocity, accumulators):
    each takes its weight's layout.

    Relies on: BaseOptimizer.add_variable_from_reference names a slot "{weight.path with / as _}_{name}", with the
    weight's shape.
    """
    by_prefix = {variable.path.replace("/", "_") + "_": variable for variable in trainable_variables}
    references = {}
    for slot in optimizer.variables:
        matching = [prefix for prefix, weight in by_prefix.items()
                    if slot.name.startswith(prefix) and tuple(slot.shape) == tuple(weight.shape)]
        if matching:  # the longest: "dense_kernel_a_momentum" is kernel_a's, not kernel's
            references[id(slot)] = by_prefix[max(matching, key=len)]
    return references


@contextlib.contextmanager
def no_distribution():
    """Inside, Keras sees no distribution (a step traced here runs on the device of its arrays); the one in force
    is back on exit: the one way acceltrain sets none (layout/verify.py, a call on one device in
    backends/jax/op_by_op.py, the step timed on one device in backends/jax/steps.py). Public API."""
    before = keras.distribution.distribution()
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(before)


@contextlib.contextmanager
def computing_in_float32(model):
    """Inside, every layer of `model` (nested ones too) computes in float32, its variables as they are; each layer's
    own policy is back on exit (layout/verify.py asks a bfloat16 model which weights have a gradient at all,
    without bfloat16's round-off).

    Relies on: Layer._flatten_layers(include_self=True, recursive=True) yields every layer once; Layer.__call__ reads
    `dtype_policy` (settable, public) at each call to cast inputs and, under autocast, variables.
    """
    layers = list(model._flatten_layers(include_self=True, recursive=True))
    own = [layer.dtype_policy for layer in layers]
    for layer in layers:
        layer.dtype_policy = "float32"
    try:
        yield
    finally:
        for layer, policy in zip(layers, own):
            layer.dtype_policy = policy


# --- Saving ------------------------------------------------------------------------------------

@contextlib.contextmanager
def saving_without_tensorflow():
    """Inside, Keras's model.save does not import TensorFlow where this process has not: no TensorFlow object can
    then be in the model, and the import only checked for one. The ledger booked it as the rest of every
    `acceltrain train` on JAX with TensorFlow installed (seconds: most of its rest, here).

    Relies on: keras.src.saving.serialization_lib tests `tf.available and isinstance(obj, tf.TensorShape)` (and
    tf.DType, tf.TypeSpec) through keras.src.utils.module_utils.tensorflow, a LazyModule whose `available` imports
    TensorFlow at its first read and keeps the answer in `_available`.
    """
    import sys

    from keras.src.utils import module_utils

    lazy = module_utils.tensorflow
    if "tensorflow" in sys.modules or lazy._available is not None:
        yield  # imported already (or asked): Keras's own answer stands
        return
    lazy._available = False
    try:
        yield
    finally:
        if lazy.module is None:
            lazy._available = None  # asked again later, Keras imports it as it would have


# --- Saving -------------------------------------------------------------------------------------

SAVING_METHODS = ("save", "save_weights")


@contextlib.contextmanager
def saving_replaced(*replacements):
    """Inside, keras.Model.save and save_weights are one door: each call passes `replacements` in order, outermost
    first, then Keras's own. A replacement is `replace(name, method)` returning the method that stands for `method`
    (the next one in, or Keras's own). One patch, however many there are; restored on exit.

    Relies on: every model's save/save_weights are keras.Model's (subclasses rarely override them).
    """
    def door(name, keras_own):
        method = keras_own
        for replace in reversed(replacements):
            method = replace(name, method)
        return method

    with patched(keras.Model, SAVING_METHODS, door):
        yield


@contextlib.contextmanager
def set_backend_replaced(replace):
    """Inside, keras.config.set_backend is `replace(original)`; restored on exit: its one door (acceltrain run keeps a
    script's call from reloading Keras). Public API, patched here beside the other doors into Keras."""
    with patched(keras.config, ["set_backend"], lambda _, keras_own: replace(keras_own)):
        yield


@contextlib.contextmanager
def clear_session_replaced(replace):
    """Inside, keras.backend.clear_session and keras.utils.clear_session (one function, exported twice) are
    `replace(original)`; restored on exit: its one door (on TensorFlow, acceltrain leaves its strategy's scope for
    the reset and enters it again: backends/tensorflow.py::scope). Public API, patched here beside the other doors."""
    with patched(keras.backend, ["clear_session"], lambda _, keras_own: replace(keras_own)), \
            patched(keras.utils, ["clear_session"], lambda _, keras_own: replace(keras_own)):
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


# --- A call that cannot be distributed: compiled where JAX can, else undistributed (backends/jax/op_by_op.py) -

def layers_not_jitted(model) -> list:
    """The model's layers, nested ones included, that make Keras run its step uncompiled.

    Relies on: trainers/trainer.py::model_supports_jit, which resolves jit_compile="auto" to False unless
    every layer of `model._flatten_layers()` has `supports_jit` True.
    """
    return [layer for layer in model._flatten_layers() if not layer.supports_jit]


def jittable_random_crop(layer) -> None:
    """Let JAX compile this RandomCrop: its random offsets cut with a dynamic slice, the same pixels.

    Relies on: RandomCrop.get_random_transformation returns (h_start, w_start), traced scalars in training
    when the image is larger than the crop (Python ints otherwise), and transform_images(images,
    transformation, training) cuts images[h_start:h_start + height, w_start:w_start + width] with them, a
    Python slice JAX cannot trace; keras.ops.slice takes the start as a traced value (lax.dynamic_slice).
    """
    crop = type(layer).transform_images

    def transform_images(images, transformation, training=True):
        h_start, w_start = transformation
        if not training or (isinstance(h_start, int) and isinstance(w_start, int)):
            return crop(layer, images, transformation, training=training)
        images = layer.backend.cast(images, layer.compute_dtype)
        start, shape = [0] * len(images.shape), list(images.shape)
        start[layer.height_axis], start[layer.width_axis] = h_start, w_start
        shape[layer.height_axis], shape[layer.width_axis] = layer.height, layer.width
        return keras.ops.slice(images, start, shape)

    layer.transform_images = transform_images
    layer.supports_jit = True


def state_variables(model) -> list:
    """Every variable a fit/evaluate/predict of `model` reads or writes: the model's, its optimizer's and its
    compiled metrics' (each once)."""
    optimizer = getattr(model, "optimizer", None)
    everything = [*model.variables, *(optimizer.variables if optimizer is not None else []),
                  *getattr(model, "metrics_variables", [])]
    return list({id(v): v for v in everything}.values())


@contextlib.contextmanager
def variables_on_one_device(model, device, layout_of):
    """Inside, every variable of the model, its optimizer and its metrics lives on `device` alone (a copy this
    process holds whole: its own part of a variable replicated over several processes), new values stay there,
    and variables made inside get no layout. On exit each is laid out again: as it was, or by
    `layout_of(variable)` for one made inside (fit builds its optimizer and metrics at its first call).

    Relies on: a JAX Variable keeps its array in `_value` and its distribution's layout in `_layout`;
    `_direct_assign` (every assign) lays a value out by `_layout` when it has one, and keeps it as given
    when it is None; a new variable takes its layout from the global distribution, none when there is none.
    """
    import jax
    import numpy as np

    variables = state_variables(model)
    layouts = {id(v): v._layout for v in variables}
    for variable in variables:
        value = variable._value
        variable._layout = None
        if value is not None:
            whole = value if value.is_fully_addressable else value.addressable_shards[0].data
            variable._value = jax.device_put(whole, device)
    try:
        yield
    finally:
        for variable in state_variables(model):
            layout = layouts[id(variable)] if id(variable) in layouts else layout_of(variable)
            variable._layout = layout
            if layout is not None and variable._value is not None:  # None: a call that raised took it out
                variable.assign(np.asarray(variable._value))  # from the host: alike in every process


# --- A fit's step, timed again on one device (backends/jax/steps.py::_timed_on_one_device) -------------------------

def training_state(model) -> tuple:
    """The state of the fit in progress after its last step, as Keras's JAX `train_step(state, batch)` takes it:
    (trainable, non-trainable, optimizer, metrics) arrays.

    Relies on: JAXTrainer.fit sets `self._jax_state`, a dict of those four lists under "trainable_variables",
    "non_trainable_variables", "optimizer_variables" and "metrics_variables", after each step and before
    on_train_batch_end.
    """
    state = model._jax_state
    return tuple(list(state[name]) for name in ("trainable_variables", "non_trainable_variables", "optimizer_variables",
                                          "metrics_variables"))


def keep_last_batch(model) -> dict:
    """From now on, `kept["batch"]` is the last batch the model's train function took (a reference: nothing is
    copied), until `kept["stop"]()` empties its slot ("last_batch") of the train function's one door.

    Relies on: JAXTrainer.fit calls `self.train_function(state, iterator)` each step (make_train_function keeps an
    existing one), and that function takes `next(iterator)` as the batch of `train_step(state, batch)`.
    """
    kept = {}

    class Kept:
        def __init__(self, iterator):
            self.iterator = iterator

        def __iter__(self):
            return self

        def __next__(self):
            kept["batch"] = next(self.iterator)
            return kept["batch"]

    def last_batch(state, iterator):
        return Kept(iterator)

    _hook_train_function(model, "last_batch", last_batch)
    kept["stop"] = lambda: _unhook_train_function(model, "last_batch", last_batch)
    return kept


# --- The rest, one module a concern (each is Keras's private code too) -----------------------------------------
from acceltrain.backends.keras_internals.callbacks import (  # noqa: E402
    async_safe, backups_deleted_by_any_process, batch_hooks_idle, callbacks_added, callbacks_in)
from acceltrain.backends.keras_internals.builds import (  # noqa: E402
    metrics_results_from_the_last_step, optimizer_built_at_once, variables_initialized_at_once)
from acceltrain.backends.keras_internals.device_data import arrays_on_devices, keras_scans_steps  # noqa: E402
from acceltrain.backends.keras_internals.strategies import (  # noqa: E402
    SCALED_REDUCTIONS, added_losses_scaled_once, built_but_not_marked, built_from_one_replica, draws_apart_per_replica,
    keras_objects_made_in, numbers_read_from_mirrored)
