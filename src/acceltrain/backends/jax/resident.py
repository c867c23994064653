"""In-memory arrays kept on the devices for a fit (its validation data read by Keras from the host), and many
training steps a dispatch (issue 43).

`on_devices(call, distribution)` is the placement layer's part (op_by_op.follow_placement), for a script's fit and
Runtime.fit's alike: where a fit's inputs are in-memory arrays (NumPy or JAX) and fit a share of the devices' memory
(decisions.choose_device_data), they are placed on the devices once a call (replicated over the distribution's
devices: each gathers its own rows of a batch), and Keras gets a data adapter that sends only each batch's indices and
gathers the batch there, in Keras's own order (keras_internals.arrays_on_devices: the same host permutation, so an
exact resume and --verify see the same batches). Validation data Keras reads from the host. In a job of several processes
each places its own share on its own devices and each device gathers its rows of the global batch (shares.py); there
the runner of steps gathers every batch (Keras's own reads come from the host).

A fit whose callbacks need no batch hook (decisions.choose_steps_per_dispatch) then runs its epoch in a few
dispatches (`many_steps`): each one compiled loop of Keras's own train step over batches gathered on the device from a
buffer of indices, as many steps as about a second holds (measured on the fit's own steps); one program for every
count. ACCELTRAIN_DEVICE_DATA=0 turns both off.
"""

import contextlib
import functools
import math
import os
import time
import weakref

import jax
import numpy as np

from acceltrain.backends.jax import shares
from acceltrain.backends.jax.steps import _steps_must_not_overlap, _tell_once
from acceltrain.inputs import device_arrays

ENV_OFF = "ACCELTRAIN_DEVICE_DATA"
SETTING = {"device_data": "auto"}  # the latest connect()'s device_data (keep_data_on_devices): "auto" or "off"
OFF_BY = "--device-data off (Runtime.keep_data_on_devices('off'))"
SECONDS_A_DISPATCH = 1.0  # the time cap of one dispatch: progress, the stall watch and stop_training stay live
PROBE_STEPS = 8  # the steps of the dispatch that measures a step (after the one that compiles)
INDEX_BYTES = 64 * 2**20  # the most index bytes one dispatch sends


def on_devices(call, distribution):
    """A context giving the call to run: `call` itself, or one whose inputs are adapters over arrays kept on the
    devices (and, for a fit with no batch hook, model.steps_per_execution set to its epoch for the call: its steps
    run by ManySteps). Said once a process in one line with its numbers."""
    from acceltrain import decisions
    from acceltrain.backends import keras_internals

    if call.name != "fit":  # evaluate and predict read their data once: placing it first saves nothing, and
        return contextlib.nullcontext(call)  # its gather would be one more program to compile per batch shape
    arguments = call.arguments()
    validation = arguments.get("validation_data")
    epoch = getattr(arguments.get("x"), "arrays_in_order", None)  # one epoch of Runtime.fit with checkpoints
    if epoch is not None:  # in a job, each process places the whole set: its epoch's rows are drawn from all of them
        parts = (epoch.fit.x, epoch.fit.y, epoch.fit.sample_weight, validation)
    else:
        epoch, parts = None, (arguments.get("x"), arguments.get("y"), arguments.get("sample_weight"), validation)
    split = bool(arguments.get("validation_split")) and validation is None
    arrays = device_arrays.resident(parts, split, (np.ndarray, jax.Array))
    device_memory, copies = _device_memory(distribution)
    processes = jax.process_count()
    on, reason = decisions.choose_device_data(
        keras_internals_backend(), arrays, device_arrays.nbytes(parts[:3]) * copies if arrays else 0, device_memory,
        processes, _turned_off(), keras_internals.keras_scans_steps(),
        weights_elsewhere=_weights_elsewhere(call.model, distribution),
        share_rows=len(jax.tree.leaves(parts[0])[0]) if arrays else 0,
        in_job_not=_in_job_not(call, distribution) if processes > 1 else "", whole_set=epoch is not None)
    _tell_once(f"in-memory data on the devices: {'yes' if on else 'no'} ({reason})")
    if not on:
        return contextlib.nullcontext(call)
    return _placed(call, arguments, distribution, epoch)


def _in_job_not(call, distribution) -> str:
    """What keeps a fit in a job of several processes on Keras's input path, in words; empty where nothing does. Its
    batches are gathered by the runner of steps (ManySteps) alone: one gathered outside it would reach Keras's
    distribution, which joins local batches, as a global array; a fit whose callbacks it cannot join (a subclass of
    CallbackList, its own methods standing: Call.with_callback) keeps Keras's path."""
    from acceltrain.backends import keras_internals

    model = call.model
    if not call.takes_callbacks():
        return "callbacks acceltrain's runner of steps cannot join (given by position, or a subclass of CallbackList)"
    if distribution is None:
        return "no distribution to place each share by"
    if not shares.splits_over_every_device(distribution):
        return "a mesh whose devices share rows of a batch (a model axis)"
    if not keras_internals.uses_keras_train_step(model):
        return "the model's own train_step"
    if not model.jit_compile or model.run_eagerly:
        return "an uncompiled step (run_eagerly or jit_compile=False)"
    return ""


def keep_data_on_devices(setting: str) -> None:
    """Runtime.keep_data_on_devices: "auto" (decisions.choose_device_data) or "off" (Keras's own input path) for the
    fits after it; a closed runtime's is "auto" again (Runtime.close)."""
    SETTING["device_data"] = setting


def _turned_off() -> str:
    """What turned device data off, in words; empty where nothing did."""
    if SETTING["device_data"] == "off":
        return OFF_BY
    return f"{ENV_OFF}=0" if os.environ.get(ENV_OFF) == "0" else ""


def keras_internals_backend() -> str:
    import keras

    return keras.backend.backend()


@contextlib.contextmanager
def _placed(call, arguments, distribution, epoch=None):
    """`epoch`: an inputs.EpochBatches (one epoch of Runtime.fit with checkpoints): its arrays placed once for the
    whole fit (kept in its Fit's `on_devices`), the epoch's rows gathered from them in its order."""
    from acceltrain import decisions
    from acceltrain.backends import keras_internals

    kept = epoch.fit.on_devices if epoch is not None else {}  # placed arrays, by what: reused while `where` holds
    place, gather = _placer(distribution), _gather(distribution)
    several = jax.process_count() > 1  # each process its share: Keras's own reads come from the host (_in_job_not)
    placed = {}  # the training adapter, once made: its tokens gather their batch when asked (the step timer)

    def token(indices):
        return _Indices(indices, lambda: placed["train"]._gather(placed["train"].placed, indices))

    def adapter(what, *arrays, **kwargs):
        earlier = kept.get(what)
        made = keras_internals.arrays_on_devices(
            *arrays, place=place, gather=gather, token=token,
            placed=earlier[1] if earlier and earlier[0] is distribution else None, keras_gathers=not several, **kwargs)
        kept[what] = (distribution, made.placed)
        return made

    model = call.model
    kwargs = {name: value for name, value in arguments.items()
              if name not in ("x", "y", "sample_weight", "class_weight", "validation_split")}
    if epoch is not None:  # the batch is the prepared one (Keras's PyDataset took it from the batches)
        train = kwargs["x"] = adapter("train", epoch.fit.x, epoch.fit.y, epoch.fit.sample_weight,
                                      batch_size=epoch.fit.local_batch_size, steps=None, shuffle=False,
                                      class_weight=None, order=epoch.local_order())
    else:
        train = kwargs["x"] = adapter("train", arguments.get("x"), arguments.get("y"), arguments.get("sample_weight"),
                                      batch_size=arguments.get("batch_size"), steps=arguments.get("steps_per_epoch"),
                                      shuffle=arguments.get("shuffle", True), class_weight=arguments.get("class_weight"))
    placed["train"] = train
    kwargs["shuffle"] = False  # the adapter shuffles as Keras would
    # validation_data stays as given: Keras's own test step on batches from the host. Gathered on the devices it
    # compiled a gather for each of its batch shapes (3 programs more in `acceltrain train`, issue 43's count), and a
    # pass read from the host costs a fraction of a training step a sample (the ledger's evaluation line)
    callbacks = keras_internals.callbacks_in(kwargs.get("callbacks"))  # a list, or a CallbackList the caller built
    steps_per_epoch = arguments.get("steps_per_epoch") or train.num_batches
    live = [c.hears_each_second for c in callbacks if getattr(c, "hears_each_second", "")]  # each one's own name
    hooked = tuple(type(c).__name__ for c in batch_hooked(callbacks))
    keras_step = keras_internals.uses_keras_train_step(model)
    compiled = bool(model.jit_compile) and not model.run_eagerly
    steps, reason = decisions.choose_steps_per_dispatch(
        steps_per_epoch, model.steps_per_execution, hooked, keras_step, compiled, train.batch_size * 4, INDEX_BYTES,
        live=", ".join(live), seconds_a_step=_SECONDS_A_STEP.get(model),
        first_steps=2 * PROBE_STEPS, seconds=SECONDS_A_DISPATCH,
        steps_apart=math.gcd(*(getattr(c, "steps_apart", 0) for c in callbacks)),
        most_steps=min((c.most_steps for c in callbacks if getattr(c, "most_steps", 0)), default=0))
    devices = _devices(distribution)
    in_one_program, how = decisions.choose_step_loop(devices[0].platform, len(devices))
    _tell_once(f"steps an execution: {steps} ({reason}){f'; {how}' if steps > 1 else ''}")
    # The loop's buffer of indices holds as many steps as any execution of the fit's epochs may run, whatever count
    # the clock sized: its rows are the program's shape, the count a traced argument, so one program serves every
    # count (a buffer of the count's rows compiled the loop again for each count measured: 12 programs in a loaded
    # `acceltrain train`, 2 in a quiet one)
    whole = max(epoch.fit.steps_per_epoch or 0, steps_per_epoch) if epoch is not None else steps_per_epoch
    rows = min(whole, max(steps, INDEX_BYTES // (train.batch_size * 4)))
    runner = many_steps(model, train, distribution, [c for c in callbacks if hasattr(c, "between_dispatches")],
                        in_one_program, rows)
    # A count the clock sized (a step measured slow on a loaded machine gives 1) runs the same programs as any other:
    # ManySteps's step, never Keras's own, whose program rounds otherwise (1 float32 ulp in the weights, measured)
    sized_by_us = compiled and keras_step and not hooked
    ran = call.replace(args=(), kwargs=kwargs)
    if (steps <= 1 and not several and not sized_by_us) or runner not in keras_internals.callbacks_in(
            (ran := ran.with_callback(runner)).kwargs.get("callbacks")):
        yield call.replace(args=(), kwargs=kwargs)  # Keras's own loop, or callbacks the caller configured
        return
    if steps <= 1:  # one step an execution (a job of several processes, or a count the clock sized): the runner's step
        yield ran
        return
    own = model.steps_per_execution
    model.steps_per_execution = steps  # Keras's epoch iterator steps by it
    if own < steps and own <= 1 and not _made_for_many_steps(model):
        keras_internals.forget_compiled_functions(model)  # made again with their loop over steps_per_execution
    try:
        yield ran
    finally:
        model.steps_per_execution = own  # the functions, made for many steps, loop over as many as it says
        _MADE_FOR_MANY_STEPS[model] = _functions(model)


# A model's training step as ManySteps measured it (seconds): a later fit's executions sized by it
_SECONDS_A_STEP = weakref.WeakKeyDictionary()

# A model's compiled functions as last made for many steps an execution (Keras's JAX functions read
# steps_per_execution at each call, and loop only when made with more than one): a later fit on device data reuses
# them, and the loop compiled for its steps (_compiled), instead of compiling them again. compile() makes new ones.
_MADE_FOR_MANY_STEPS = weakref.WeakKeyDictionary()


def _functions(model) -> tuple:
    from acceltrain.backends import keras_internals

    return keras_internals.compiled_functions(model)


def _made_for_many_steps(model) -> bool:
    made = _MADE_FOR_MANY_STEPS.get(model)
    return made is not None and all(a is b for a, b in zip(made, _functions(model)))


def batch_hooked(callbacks) -> list:
    """The callbacks Keras must call at each batch of a fit: those that override a batch method of
    keras.callbacks.Callback (on_batch_begin/end, on_train_batch_begin/end), less Keras's ProgbarLogger and History,
    and callbacks marked `steps_aware = True` (acceltrain's own: the ledger, the stall watch, the first-step status,
    one step at a time, the step timer), whose batch methods work as well every K steps, and Keras's checkpoint
    callbacks saving at epochs' ends, whose batch hooks then do nothing (keras_internals.batch_hooks_idle). With none,
    a fit may run to its epoch's end in a few dispatches; with some, every `steps_per_execution` steps, as Keras
    documents."""
    import keras

    from acceltrain.backends import keras_internals

    base = keras.callbacks.Callback
    names = ("on_batch_begin", "on_batch_end", "on_train_batch_begin", "on_train_batch_end")
    coarse = (keras.callbacks.ProgbarLogger, keras.callbacks.History)
    return [callback for callback in callbacks
            if not isinstance(callback, coarse) and not getattr(callback, "steps_aware", False)
            and not keras_internals.batch_hooks_idle(callback)
            and any(name in vars(callback) or getattr(type(callback), name) is not getattr(base, name)
                    for name in names)]  # vars: a hook set on the instance (keras.callbacks.LambdaCallback's)


# --- Placing and gathering -----------------------------------------------------------------------------------------

def _device_memory(distribution) -> tuple[int | None, int]:
    """(bytes one device may hold, copies of the data that memory holds): an accelerator's own limit, one copy; CPU
    devices share the host's memory, each holding a copy."""
    devices = _devices(distribution)
    here = [device for device in devices if device.process_index == jax.process_index()]
    stats = here[0].memory_stats() if here else None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), 1
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), len(devices)
    except (ValueError, OSError):
        return None, len(devices)


def _devices(distribution) -> list:
    """The JAX devices a call runs on: the distribution's mesh's, else this process's first."""
    if distribution is None:
        return jax.local_devices()[:1]
    return list(distribution.device_mesh.backend_mesh.devices.flat)


def _weights_elsewhere(model, distribution) -> str:
    """Where the model's built weights lie when some are not on the devices the data would be placed on (a model
    laid out on several devices with no distribution in force), in words; else empty: a step could not take both."""
    data_devices = set(_devices(distribution))
    devices = set()
    for variable in getattr(model, "variables", ()):
        sharding = getattr(getattr(variable, "value", None), "sharding", None)
        devices |= set(getattr(sharding, "device_set", ()))
    return f"{len(devices)} device(s)" if devices - data_devices else ""


_GATHERS = weakref.WeakKeyDictionary()  # a distribution's compiled gather, for every fit under it


def _gather(distribution):
    """The compiled gather of a batch from its indices under `distribution` (None: one device), made once."""
    if distribution is None:
        return _gather_on_one_device()
    if distribution not in _GATHERS:
        _GATHERS[distribution] = jax.jit(functools.partial(_batch_of, distribution))
    gather = _GATHERS[distribution]
    if jax.process_count() > 1:  # this process's indices, laid out over the job's devices
        return lambda placed, indices: gather(placed, shares.laid_out(distribution, indices))
    return gather


@functools.cache
def _gather_on_one_device():
    return jax.jit(functools.partial(_batch_of, None))


def _placer(distribution):
    """The inputs on the devices once: on the first local device, or replicated over the distribution's mesh."""
    if distribution is None:
        return functools.partial(jax.device_put, device=jax.local_devices()[0])
    if jax.process_count() > 1:  # each process its own share, a copy on each of its devices
        return functools.partial(shares.place, distribution)
    from jax.sharding import NamedSharding, PartitionSpec

    return functools.partial(jax.device_put, device=NamedSharding(distribution.device_mesh.backend_mesh,
                                                                  PartitionSpec()))


def _batch_of(distribution, placed, indices):
    """A batch gathered on the devices (traced): its rows by `indices`, laid out as the distribution lays a batch."""
    if distribution is None:
        return jax.tree.map(lambda array: array[indices], placed)
    if jax.process_count() > 1:
        batch = shares.batch_of(distribution, placed, indices)
    else:
        batch = jax.tree.map(lambda array: array[indices], placed)
    return jax.tree.map(lambda part: jax.lax.with_sharding_constraint(
        part, distribution.get_data_layout(part.shape).backend_layout), batch)


class _Indices:
    """A batch's indices standing for the batch in Keras's iterator while ManySteps pulls: a JAX pytree with no
    leaves, so Keras's data distribution (device_put by its layout) passes it as it is."""

    def __init__(self, indices, gathered):
        self.indices, self.shape, self.gathered = indices, indices.shape, gathered  # gathered(): the batch


jax.tree_util.register_pytree_node(_Indices, lambda token: ((), token), lambda token, _: token)


# --- Many steps a dispatch --------------------------------------------------------------------------------------------

def many_steps(model, adapter, distribution, listeners=(), in_one_program=True, rows=1):
    """The fit's callback that runs its executions as a few dispatches (ManySteps, made on first use: keras is
    imported after connect()); `in_one_program` False: each step its own program, one at a time (several CPU
    devices: decisions.choose_step_loop). `rows`: the most steps an execution of the fit may run (the loop's buffer
    holds at least as many, and as many as the model's earlier fits asked)."""
    return _many_steps_class()(model, adapter, distribution, listeners, in_one_program, rows)


@functools.cache
def _many_steps_class():
    import keras

    class ManySteps(keras.callbacks.Callback):
        """A fit's executions run as a few dispatches, each one compiled loop of Keras's own train step over batches
        gathered on the device (`_program`): installed on the model's train function at the fit's start (Keras has
        built the model and its optimizer by then), taken off at its end. The partial last batch runs Keras's own
        step. After each dispatch the `listeners` hear `between_dispatches(steps)`, the execution's steps done so far
        (the stall watch beats)."""

        steps_aware = True

        def __init__(self, model, adapter, distribution, listeners, in_one_program, rows):
            super().__init__()
            self.in_one_program, self.rows = in_one_program, rows
            # `trained`, never Callback.model inside a step: on JAX reading that syncs Keras's last state into the
            # variables, whose arrays the step is about to take (donated)
            self.trained, self.adapter, self.distribution = model, adapter, distribution
            self.listeners = list(listeners)
            self.per_step = None  # seconds a step, measured on the second probe
            self.probes = self.dispatches = 0
            self._loop = None

        def on_train_begin(self, logs=None):
            from acceltrain.backends import keras_internals

            keras_internals.run_train_executions(self.trained, self._execute)

        def on_train_end(self, logs=None):
            from acceltrain.backends import keras_internals

            keras_internals.stop_running_train_executions(self.trained)

        def _execute(self, state, iterator, keras_own):
            adapter, tokens = self.adapter, []
            adapter.tokens = True
            try:
                for _ in range(self.trained.steps_per_execution):
                    tokens.append(next(iterator))
            except StopIteration:
                pass
            finally:
                adapter.tokens = False
            if not tokens:
                raise StopIteration
            full = [token.indices for token in tokens if len(token.indices) == adapter.batch_size]
            logs, done = None, 0
            if self.distribution is None and full:  # committed, as the step puts it out: one program, not two
                state = jax.device_put(state, _devices(None)[0])
            while done < len(full):
                count = self._next_count(len(full) - done)
                started = time.perf_counter()
                logs, state = self._run(state, full[done:done + count])
                if self.probes < 2 or self.listeners:
                    jax.block_until_ready(logs)
                if self.probes < 2:
                    self.probes += 1
                    self.per_step = (time.perf_counter() - started) / count if self.probes == 2 else None
                    if self.per_step is not None and jax.process_count() > 1:  # one count a dispatch in every process
                        from jax.experimental import multihost_utils

                        self.per_step = float(multihost_utils.broadcast_one_to_all(np.float32(self.per_step)))
                    if self.per_step is not None:
                        _SECONDS_A_STEP[self.trained] = self.per_step
                done += count
                self.dispatches += 1
                for listener in self.listeners:
                    listener.between_dispatches(done)
            for token in tokens[len(full):]:  # the partial last batch: Keras's own step, its rows from the host
                batch = adapter.on_host(token.indices)
                if jax.process_count() > 1:  # each process's rows joined into the global batch, as Keras joins them
                    batch = shares.joined(self.distribution, batch)
                logs, state = keras_own(state, iter([batch]))
            return logs, state

        def _next_count(self, left: int) -> int:
            if self.per_step is None:
                return min(left, PROBE_STEPS)
            return min(left, max(1, int(SECONDS_A_DISPATCH / max(self.per_step, 1e-9))))

        def _run(self, state, indices):
            if self._loop is None:
                self._loop, self.rows = _loop_for(self.trained, self.distribution, self.in_one_program, state,
                                                  self.rows)
            placed = self.adapter.placed
            if not self.in_one_program:  # one program a step, back to back: no Keras between them
                logs, wait = None, self.distribution is not None and _steps_must_not_overlap(self.distribution)
                for row in indices:
                    logs, state = self._loop(state, placed, self._laid_out(row))
                    if wait:  # several CPU devices: a step's collectives may deadlock with the next's (steps.py)
                        jax.block_until_ready(logs)
                return logs, state
            buffer = np.zeros((max(self.rows, len(indices)), self.adapter.batch_size), np.int32)
            buffer[:len(indices)] = indices
            return self._loop(state, placed, self._laid_out(buffer), np.int32(len(indices)))

        def _laid_out(self, indices):
            """Indices split over the devices as the batch they index is (the last axis: the batch's)."""
            if self.distribution is None:
                return indices
            if jax.process_count() > 1:
                return shares.laid_out(self.distribution, indices)
            from jax.sharding import NamedSharding, PartitionSpec

            spec = PartitionSpec(*([None] * (indices.ndim - 1)), self.distribution.batch_dim_name)
            return jax.device_put(indices, NamedSharding(self.distribution.device_mesh.backend_mesh, spec))

    return ManySteps


# model: (the Keras train function they go with, {key: (distribution, loop, its buffer's rows)})
_LOOPS = weakref.WeakKeyDictionary()


def _loop_for(model, distribution, in_one_program: bool, state, rows: int) -> tuple:
    """(_compiled, the rows of its buffer of indices), made once while the model's Keras functions stand: a later
    fit reuses its program, with a buffer as large as any fit before it asked (one shape: one program)."""
    function = _functions(model)[0]
    made, loops = _LOOPS.get(model, (None, {}))
    if made is not function or function is None:
        loops = {}
    kept = loops.get(in_one_program)
    if kept is None or kept[0] is not distribution:
        kept = (distribution, _compiled(model, distribution, in_one_program, state), rows)
    kept = loops[in_one_program] = (*kept[:2], max(kept[2], rows))
    _LOOPS[model] = (function, loops)
    return kept[1], kept[2]


def _compiled(model, distribution, in_one_program: bool, state):
    """Keras's own train step on batches gathered on the devices, the state donated and put out as Keras's jitted
    train step puts it out: `count` steps in one jitted loop over the batches a buffer's rows index (one program for
    every count), or one step on the batch of one row of indices. `state`: the fit's, as Keras laid it out."""
    step = model.train_step

    def one(state, placed, indices):
        return step(state, _batch_of(distribution, placed, indices))

    def loop(state, placed, buffer, count):
        shapes = jax.eval_shape(lambda s: one(s, placed, buffer[0])[0], state)
        logs = jax.tree.map(lambda shape: jax.numpy.zeros(shape.shape, shape.dtype), shapes)
        return jax.lax.fori_loop(0, count, lambda i, carried: one(carried[1], placed, buffer[i]), (logs, state))

    out = (None, jax.tree.map(lambda value: value.sharding, state)) if distribution is not None else None
    return jax.jit(loop if in_one_program else one, donate_argnums=0, out_shardings=out)
