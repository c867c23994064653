"""Fewer programs at a fit's start: variables' initial values, an optimizer's slots and metrics' results, each in one program.

Part of backends/keras_internals/: every use of Keras's private code, each with the behaviour it relies on and a test
by name in tests/backends/test_keras_internals.py.
"""

import contextlib
import functools

import keras

from acceltrain.backends.interception import patched

# --- Initial values in one program, not one eager op per initializer and shape (issue 43, item 4) ---------------

@contextlib.contextmanager
def variables_initialized_at_once():
    """Keras variables created inside from an initializer get their initial values at the block's end from one
    compiled program, not one eager op (on JAX one compile) per initializer and shape (the seed's MLP: 13): the
    same arrays, from the same seeds. One read before the end computes its value as Keras would. JAX only, not NNX.
    One whose initializer draws from a SeedGenerator (a draw advances its state) is initialized as Keras would, op
    by op, and so are all if the program cannot be traced.

    Relies on: a JAX Variable made from a callable initializer sets `_shape`, then calls
    `_initialize_with_initializer(initializer)`; one whose `_value` is None and `_initializer` set computes its
    value from the initializer when read (as a variable created in a StatelessScope does);
    `_initialize(value)` lays the value out and sets it; `_deferred_initialize()` is Keras's own initialization.
    """
    if keras.backend.backend() != "jax" or keras.config.is_nnx_enabled():
        yield
        return
    try:
        from keras.src.backend.jax.core import JaxVariable
    except ImportError:  # keras-nightly 3.16: moved into ops/, named Variable
        from keras.src.backend.jax.ops.core import Variable as JaxVariable

    pending = []

    def later(variable, initializer):
        variable._initializer, variable._value = initializer, None
        pending.append(variable)

    with patched(JaxVariable, ["_initialize_with_initializer"], lambda name, keras_own: later):
        yield
    _initialize_at_once(pending)


def _initialize_at_once(variables) -> None:
    """Each variable's initial value, those from stateless initializers computed in one jitted program."""
    import jax

    def draws_state(variable):
        return isinstance(getattr(variable._initializer, "seed", None), keras.random.SeedGenerator)

    together = [v for v in variables if v._value is None and not draws_state(v)]
    values = None
    if together:
        def initial_values():
            with keras.StatelessScope(initialize_variables=False) as scope:
                values = [v._convert_to_tensor(v._initializer(v._shape, dtype=v._dtype)) for v in together]
            if scope.state_mapping:  # an initializer assigned some state: not one to replay in a program
                raise ValueError("an initializer changed a variable")
            return values

        try:
            values = jax.jit(initial_values)()
        except Exception:  # noqa: BLE001  (Keras's own op-by-op path below gives each its value, or its error)
            values = None
    if values is not None:
        for variable, value in zip(together, values):
            variable._initialize(value)
            variable._initializer = None
    for variable in variables:
        if variable._value is None:
            variable._deferred_initialize()


def optimizer_built_at_once(model) -> None:
    """From now on, `model`'s optimizer's build (at fit's first call, its gradient accumulation settled) makes its
    slots in one program (variables_initialized_at_once), not one op per shape (5 for the seed's MLP's RMSprop).

    Relies on: fit builds an unbuilt optimizer by calling `model.optimizer.build(trainable_variables)` (an
    instance attribute shadows the class's method; object.__setattr__ passes Keras's attribute tracking by).
    """
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or optimizer.built or "build" in vars(optimizer):
        return
    keras_own = optimizer.build

    @functools.wraps(keras_own)
    def build(*args, **kwargs):
        with variables_initialized_at_once():
            return keras_own(*args, **kwargs)

    object.__setattr__(optimizer, "build", build)


def metrics_results_from_the_last_step(model) -> None:
    """From now on, `model`'s fit and evaluate on JAX end with the metrics' results its last step returned where
    they name the same metrics, not each result computed again eagerly (3 compiles: divide_no_nan's equal, where,
    divide): the same values, the step's same functions of the state it leaves. Other names: Keras's own choice.

    Relies on: JAXTrainer.fit and evaluate, the steps done and their state synced, return
    `self._get_metrics_result_or_logs(logs)` with `logs` the last step's; it returns `get_metrics_result()` where
    its keys are the logs' (an instance attribute shadows the method; object.__setattr__ passes Keras's tracking).
    """
    import weakref

    if keras.backend.backend() != "jax" or "_get_metrics_result_or_logs" in vars(model):
        return
    import jax

    keras_own, this = model._get_metrics_result_or_logs, weakref.ref(model)

    @functools.wraps(keras_own)
    def results(logs):
        model = this()
        if model is not None and isinstance(logs, dict) and logs and \
                set(logs) == set(jax.eval_shape(model.get_metrics_result)):  # traced, not compiled
            return logs
        return keras_own(logs)

    object.__setattr__(model, "_get_metrics_result_or_logs", results)
