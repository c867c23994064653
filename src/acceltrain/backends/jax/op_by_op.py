"""The placement layer of the interception (interception.LAYERS) and the op-by-op step: plain `model.fit` under
the distribution its model was built in, and a step Keras would run op by op on several CPU devices compiled where
JAX can, else run on one device, else refused."""

import contextlib

import jax

from acceltrain.backends.jax.distribution import distribution_name, distribution_of, scope
from acceltrain.backends.jax.processes import split_over_processes
from acceltrain.backends.jax.resident import on_devices
from acceltrain.backends.jax.steps import _steps_must_not_overlap, _tell_once, step_callbacks


def follow_placement(call, proceed):
    """Layer "placement" of the interception (interception.LAYERS): plain `model.fit` runs under the
    distribution the model was built in (Keras on JAX reads it from global state at fit time, not from the
    model, as TensorFlow does), one step at a time where steps must not overlap, and a step Keras would run op
    by op made safe (op_by_op_made_safe). A model built outside any acceltrain distribution runs as Keras runs it."""
    import keras

    from acceltrain.backends import keras_internals

    # a script's fit and Runtime.fit's as `acceltrain train`'s: the optimizer's slots made in one program (5 eager ones
    # for the seed's MLP's RMSprop) and the metrics' results the last step's (3 eager ones), where Keras allows
    keras_internals.optimizer_built_at_once(call.model)
    keras_internals.metrics_results_from_the_last_step(call.model)
    distribution = distribution_of(call.model) if keras.distribution.distribution() is None else None
    in_force = distribution or keras.distribution.distribution()
    with scope(distribution), op_by_op_made_safe(call.model, in_force) as undistributed:
        if undistributed:
            call.undistributed.append(undistributed)
        for callback in [] if undistributed else step_callbacks(in_force):
            call = call.with_callback(callback)
        on_one = undistributed or in_force is None
        with on_devices(call, None if undistributed else in_force) as call, evaluation_committed(call, on_one):
            return proceed(call)


@contextlib.contextmanager
def evaluation_committed(call, one_device: bool):
    """On one device, each evaluation step of a fit's validation or an evaluate takes its state committed to the
    device, as the step puts it out: Keras's reset metrics are uncommitted arrays, so its first step compiled one
    program and the rest another, the same step twice (a test_step more in `acceltrain train`, issue 43). Under a
    distribution every value is laid out, committed already."""
    arguments = call.arguments() if call.name == "fit" else {}
    if not one_device or call.name == "predict" or (call.name == "fit" and arguments.get("validation_data") is None
                                                     and not arguments.get("validation_split")):
        yield
        return
    from acceltrain.backends import keras_internals

    undo = keras_internals.test_states_through(call.model, _committed)
    try:
        yield
    finally:
        if undo is not None:
            undo()


def _committed(state):
    """`state` with each uncommitted array committed to the device it is on (no copy)."""
    def committed(leaf):
        if isinstance(leaf, jax.Array) and not leaf.committed:
            return jax.device_put(leaf, next(iter(leaf.devices())))
        return leaf

    return jax.tree.map(committed, state)


@contextlib.contextmanager
def op_by_op_made_safe(model, distribution):
    """Every fit/evaluate/predict under `distribution`, the script's (follow_placement) and Runtime's own: where
    Keras would run the model's step op by op on several CPU devices (decisions.choose_op_by_op_step), compile it
    when JAX can, else run the call on one device (yields why), else (several processes: `launch`'s FitGuard runs
    a script's such calls over arrays on one device before this, op_by_op_in_processes) refuse; said in one line.
    Yields None where the call stays distributed."""
    if distribution is None or not _steps_must_not_overlap(distribution):
        yield None
        return
    import keras

    from acceltrain.backends import keras_internals
    from acceltrain.errors import UsageError

    not_jitted = keras_internals.layers_not_jitted(model)
    treatment, reason = _op_by_op_step(model, distribution, not_jitted, jax.process_count())
    if treatment == "refuse":
        raise UsageError(f"{reason}. Run this script in one process (acceltrain run), where such a call runs on one "
                         "device, or keep the layer out of the model (in the tf.data pipeline).")
    if treatment == "compile":
        for layer in not_jitted:
            if type(layer) is keras.layers.RandomCrop:
                keras_internals.jittable_random_crop(layer)
            layer.supports_jit = True
        model.jit_compile = True
        keras_internals.forget_compiled_functions(model)
        _tell_once(f"compiling the model's step (jit_compile=True): {reason}. To keep Keras's op-by-op step, run "
                   "on one device")
    if treatment != "one device":
        yield None
        return
    _tell_once(f"running on one device, on the whole global batch: {reason}")
    with on_one_device(model, distribution):
        yield reason


def _op_by_op_step(model, distribution, not_jitted, processes: int) -> tuple[str, str]:
    """decisions.choose_op_by_op_step for `model` under `distribution` (over several CPU devices)."""
    from acceltrain import decisions

    return decisions.choose_op_by_op_step(
        distribution.device_mesh.devices.size, processes, tuple(_keras_class_name(layer) for layer in not_jitted),
        bool(model.jit_compile), bool(model.run_eagerly))


def op_by_op_in_processes(model) -> str | None:
    """In a job of several processes over CPU devices: why a call of `model` must run on one device (Keras would run
    its step op by op, and JAX cannot compile it), else None. `acceltrain launch`'s FitGuard asks before it splits
    the inputs between the processes, so that each process runs the same call on the same, whole inputs (placement
    could only refuse it: op_by_op_made_safe). Decided as in one process (decisions.choose_op_by_op_step)."""
    import keras

    from acceltrain.backends import keras_internals

    distribution = distribution_of(model) or keras.distribution.distribution()
    if jax.process_count() <= 1 or distribution is None or not _steps_must_not_overlap(distribution):
        return None
    treatment, reason = _op_by_op_step(model, distribution, keras_internals.layers_not_jitted(model), 1)
    return reason if treatment == "one device" else None


@contextlib.contextmanager
def on_one_device(model, distribution=None):
    """Inside, `model` trains, evaluates and predicts undistributed, on this process's first device: its variables
    (and its optimizer's and metrics') moved there whole, no global distribution; on exit they are laid out by
    their distribution again. In a job of several processes each process runs the same call on its own device
    with the same, whole inputs (no collective: every process computes the same values); its functions made for one
    device (those of its distributed calls kept for after). `distribution`: the
    model's (default: the one its variables are placed by, else the global one)."""
    import keras

    from acceltrain.backends import keras_internals

    distribution = distribution or distribution_of(model) or keras.distribution.distribution()
    if distribution is None:
        yield
        return
    split = split_over_processes(keras_internals.state_variables(model))
    if split:
        from acceltrain.errors import UsageError

        raise UsageError(f"A call that must run on one device (no batch of it divides over the replicas) met weights "
                         f"split over {jax.process_count()} processes ({distribution_name(distribution)}; e.g. "
                         f"{split[0]}): no process holds them whole. Pass --distribution data, or a batch that "
                         "divides over the replicas.")
    with keras_internals.variables_on_one_device(model, jax.local_devices()[0], distribution.get_variable_layout), \
            keras_internals.no_distribution(), keras_internals.functions_made_anew(model):
        yield


def _keras_class_name(layer) -> str:
    """"RandomCrop" for Keras's own layer; a subclass or a namesake goes by its full name."""
    import keras

    name = type(layer).__name__
    return name if type(layer) is getattr(keras.layers, name, None) else f"{type(layer).__module__}.{name}"
