"""`acceltrain run SCRIPT.py`: a plain Keras script, unchanged, on the hardware connect() finds.

    run_script("train.py", ["--epochs", "3"], simulate_devices=8)

1. connect() starts the backend (and jax.distributed, in a multi-process job) before the script imports
   Keras; 2. the distribution is made global (JAX) or the script runs in the strategy's scope
   (TensorFlow), so every model the script builds is distributed; 3. each fit and evaluate is checked
   (`checks.py`) and, in a multi-process job, fed this process's slice of the data; 4. the script runs
   as `__main__`, with its own argv, exit code and traceback; 5. at its end, one line says which of its Keras
   calls ran distributed, and when it fails, whether the failing call fails without acceltrain's hooks too.
"""

import contextlib
import functools
import inspect
import math
import runpy
import sys
import traceback
from collections import Counter
from pathlib import Path

import numpy as np

from acceltrain import checks, data, log
from acceltrain.errors import UsageError
from acceltrain.runtime import connect, inputs_prepared


def run_script(path: str, argv=(), *, backend: str | None = None, simulate_devices: int | None = None,
               distribution: str = "auto", platform: str = "auto", tpu: str | None = None,
               coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None,
               stall_timeout: float | None = None) -> int:
    """Run the Python file at `path` as `__main__` with sys.argv = [path, *argv]. Returns its exit code."""
    script = Path(path)
    if not script.is_file():
        raise UsageError(f"Received script {path!r}, which is not a file. Pass the path of a Python "
                         "script, e.g. acceltrain run train.py --epochs 3")
    runtime = connect(backend, simulate_devices=simulate_devices, distribution=distribution, platform=platform,
                      tpu=tpu, coordinator=coordinator, num_processes=num_processes, process_id=process_id,
                      stall_timeout=stall_timeout)
    _never_outlive_the_job()
    framework = runtime._framework
    if runtime.num_processes > 1:
        # Every process must draw the same initial weights (JAX checks, and stops, when they differ); a
        # script that seeds itself overrides this.
        runtime.seed(0)
    with contextlib.ExitStack() as stack:
        stack.enter_context(_as_main_script(script, argv))
        stack.enter_context(runtime.scope())  # JAX: the global distribution; TF: the strategy's scope
        stack.enter_context(framework.fit_hook(FitGuard(runtime)))
        if runtime.process_index > 0:
            stack.enter_context(_saving_elsewhere(runtime.process_index))
        calls = stack.enter_context(KerasCalls(runtime).watching())  # outermost: sees each call as the script made it
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as exit:
            calls.tell_summary()
            return _exit_code(exit.code)
        except UsageError:
            raise  # acceltrain's own message (a fit check), printed by the CLI
        except Exception as error:  # the script's own failure: its traceback, from its own frames
            _print_script_traceback(error, script)
            calls.tell_whose(error, script)
            return 1
    calls.tell_summary()
    return 0


def _never_outlive_the_job() -> None:
    """Launched: end with the launcher; and show this process's stacks when asked (SIGUSR1), which the
    launcher does when another process stalled, so the job shows where each process stood."""
    import signal

    from acceltrain import watchdog
    from acceltrain.commands.launch import watch_launcher

    watch_launcher()
    if hasattr(signal, "SIGUSR1"):
        watchdog.show_stacks_on(signal.SIGUSR1)


@contextlib.contextmanager
def _as_main_script(script: Path, argv):
    """sys.argv and sys.path[0] as `python SCRIPT.py ARGS` would set them; restored after."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *argv]
    sys.path.insert(0, str(script.resolve().parent))
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message") prints it and exits 1, as Python does
    return 1


def _print_script_traceback(error: BaseException, script: Path) -> None:
    """The traceback from the script's first frame on: acceltrain's and runpy's frames are not the user's."""
    tb = error.__traceback__
    target = str(script.resolve())
    while tb is not None and str(Path(tb.tb_frame.f_code.co_filename).resolve()) != target:
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb or error.__traceback__, file=sys.stderr)


@contextlib.contextmanager
def _saving_elsewhere(process_index: int):
    """Only process 0 writes the model: two writers of one path on a shared disk would corrupt it.

    The other processes still save, to a temporary folder thrown away after: reading variables spread
    over all processes' devices is a collective step every process must take, or process 0 waits forever.
    """
    import tempfile

    import keras

    saved = {name: getattr(keras.Model, name) for name in ("save", "save_weights")}
    told = []

    def elsewhere(name, method):
        def save(model, filepath, *args, **kwargs):
            with tempfile.TemporaryDirectory(prefix="acceltrain-discarded-") as folder:
                method(model, str(Path(folder) / Path(str(filepath)).name), *args, **kwargs)
            if not told:
                told.append(name)
                log.info(f"process {process_index}: model.{name}({str(filepath)!r}) left to process 0, which writes")

        return save

    for name, method in saved.items():
        setattr(keras.Model, name, elsewhere(name, method))
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(keras.Model, name, method)


class KerasCalls:
    """The script's fit, evaluate and predict calls, as it made them: counted, and rechecked when one fails.

    When a call raises, it is rerun once with the script's own arguments and without acceltrain's hooks
    (no input preparation, no global distribution), so the user learns whose error it is. The rerun is
    skipped in a multi-process job: one process alone would wait forever in the others' collectives.
    """

    NAMES = ("fit", "evaluate", "predict")

    def __init__(self, runtime):
        self.runtime = runtime
        self.counts: Counter = Counter()
        self.failed: tuple | None = None  # (name, error, the same call's error without hooks, or None)
        self._depth = 0  # fit calls evaluate for validation: only the script's own calls count

    @contextlib.contextmanager
    def watching(self, trainer=None):
        """Inside, `trainer`'s (default: the backend's Keras trainer class) fit/evaluate/predict are watched."""
        import keras

        trainer = trainer or next(klass for klass in keras.Model.__mro__ if "fit" in vars(klass))
        hooked = {name: getattr(trainer, name) for name in self.NAMES}
        for name, method in hooked.items():
            setattr(trainer, name, self._watched(trainer, name, method, hooked))
        try:
            yield self
        finally:
            for name, method in hooked.items():
                setattr(trainer, name, method)

    def _watched(self, trainer, name, method, hooked):
        @functools.wraps(method)  # FitGuard reads Keras's signature through __wrapped__
        def call(model, *args, **kwargs):
            outermost = self._depth == 0
            self._depth += 1
            before = _variable_values(model) if outermost else []
            try:
                return method(model, *args, **kwargs)
            except UsageError:
                raise
            except Exception as error:
                if outermost and self.failed is None:
                    rerun = _restored(before)
                    self.failed = (name, error, self._recheck(trainer, name, hooked, model, args, kwargs)
                                   if rerun else "trained")
                raise
            finally:
                self._depth -= 1
                self.counts[name] += outermost

        return call

    def _recheck(self, trainer, name, hooked, model, args, kwargs):
        """The same call on Keras's own methods and no distribution: the exception it raises, None if none,
        or "skipped"."""
        if self.runtime.num_processes > 1:
            return "skipped"
        import keras

        log.info(f"model.{name} failed; running the same call once more without acceltrain's hooks, "
                 "to tell whose error it is")
        plain = {n: inspect.unwrap(m) for n, m in hooked.items()}  # each hook keeps Keras's method as __wrapped__
        watched = {n: getattr(trainer, n) for n in self.NAMES}
        previous = keras.distribution.distribution() if keras.backend.backend() == "jax" else None
        try:
            for n, m in plain.items():
                setattr(trainer, n, m)
            if previous is not None:
                keras.distribution.set_distribution(None)
            with contextlib.redirect_stdout(sys.stderr):  # the script's stdout keeps only the script's output
                plain[name](model, *args, **kwargs)
        except Exception as error:  # noqa: BLE001  (any error is the answer)
            return error
        finally:
            for n, m in watched.items():
                setattr(trainer, n, m)
            if previous is not None:
                keras.distribution.set_distribution(previous)
        return None

    def tell_whose(self, error: BaseException, script: Path) -> None:
        """After the script's traceback: whether the failure is the script's or acceltrain's."""
        if self.failed is None or self.failed[1] is not error:
            log.info(f"the error was raised in the script's own code, outside fit/evaluate/predict; to see whether "
                     f"it fails without acceltrain too, run: python {script}")
            return
        name, _, plain = self.failed
        if plain == "trained":
            log.info(f"model.{name} failed after it had run steps, so it was not rerun without acceltrain. To "
                     f"tell whose error it is, run: python {script}")
        elif plain == "skipped":
            log.info(f"model.{name} failed; not rerun without acceltrain in a job of several processes. To tell "
                     f"whose error it is, run: python {script}")
        elif plain is None:
            log.warn(f"model.{name} fails only under acceltrain: the same call without acceltrain's hooks (the "
                     "script's own inputs, no distribution) succeeds. This is acceltrain's bug, not the script's: "
                     "please report it with this output.")
        elif type(plain) is type(error):
            log.info(f"model.{name} fails the same way without acceltrain ({type(plain).__name__} with the "
                     "script's own inputs and no distribution): the error is the script's, not acceltrain's.")
        else:
            log.info(f"model.{name} fails without acceltrain too, but differently ({type(plain).__name__}: "
                     f"{plain}): most likely the script's error; to be sure, run: python {script}")

    def tell_summary(self) -> None:
        """One line at the end: what acceltrain distributed, or that it distributed nothing, and why."""
        where = (f"{self.runtime.distribution_name} over {self.runtime.num_replicas} replica(s)"
                 if self.runtime.distribution is not None else "one device")
        if self.counts:
            made = ", ".join(f"{self.counts[name]} {name}" for name in self.NAMES if self.counts[name])
            log.info(f"run: the script's Keras calls ({made}) ran on {where}")
        else:
            log.info(f"run: the script called no fit, evaluate or predict, so nothing was distributed: its models' "
                     f"variables were placed by {where}, but a hand-written training loop runs as written, each "
                     "step on the whole batch (Keras's fit/evaluate/predict are what acceltrain splits)")


def _variable_values(model) -> list:
    """(variable, value) of every variable a call may touch, on JAX only: Keras's JAX trainer takes the
    values out of the variables for the call and puts them back at its end, so a call that raises leaves
    the model without them. Only references: nothing is copied."""
    import keras

    if keras.backend.backend() != "jax":
        return []
    optimizer = getattr(model, "optimizer", None)
    own = getattr(model, "variables", [])
    variables = {id(v): v for v in [*own, *(optimizer.variables if optimizer is not None else [])]}
    return [(v, v._value) for v in variables.values()]


def _restored(values) -> bool:
    """Put the values from before a failed call back; False when steps had run (the old values were handed
    over to the step and deleted, and the new ones were lost with the failure)."""
    if any(value is not None and getattr(value, "is_deleted", lambda: False)() for _, value in values):
        return False
    for variable, value in values:
        variable._value = value
    return True


class FitGuard:
    """Called before each fit and evaluate of the script (through the backend's fit_hook).

    Checks the call (each warning printed once), then prepares numpy inputs: the last few samples
    trimmed (fit) or the set repeated (evaluate) so every batch divides over the replicas, and in a
    multi-process job each process given its own slice, so `batch_size` stays the global batch.
    """

    def __init__(self, runtime):
        self.runtime = runtime
        self.warned: set[str] = set()
        self.placement_told = False

    def __call__(self, name: str, model, args, kwargs):
        if inputs_prepared():
            return args, kwargs  # Runtime.fit's own call: its inputs and callbacks are set
        from acceltrain.backends import with_callback
        from acceltrain.training.callbacks import StallWatch

        kwargs = with_callback(getattr(type(model), name), args, kwargs, StallWatch(self.runtime.watchdog))
        bound = inspect.signature(getattr(type(model), name)).bind(model, *args, **kwargs)
        arguments = dict(bound.arguments)
        del arguments[next(iter(arguments))]  # the model itself
        arguments.update(arguments.pop("kwargs", {}))  # evaluate's **kwargs
        if not data.is_arrays(arguments.get("x")) or inputs_prepared():
            return args, kwargs  # datasets and generators, or Runtime.fit's own call: Keras takes them as they are
        if name == "fit":
            self._check(model, arguments)
            self._tell_placement(model, arguments.get("batch_size"))
            self._prepare_fit(arguments)
        else:
            self._check_batch(arguments.get("batch_size"))
            self._prepare_evaluate(arguments)
        return (), arguments

    # --- Checks ---------------------------------------------------------------------------------

    def _check(self, model, arguments) -> None:
        x, y = arguments.get("x"), arguments.get("y")
        split = arguments.get("validation_split") or 0.0
        num_samples = int(data.num_samples(x) * (1 - split))
        dtypes = {"x": a.dtype for a in data._leaves(x)[:1]}
        if isinstance(y, np.ndarray):
            dtypes["y"] = y.dtype
        findings = checks.check_fit(
            num_samples=num_samples, batch_size=arguments.get("batch_size"),
            steps_per_epoch=arguments.get("steps_per_epoch"), num_replicas=self.runtime.num_replicas,
            platform=self.runtime.platform, splits_unevenly=self.runtime._framework.SPLITS_UNEVEN_BATCHES,
            input_dtypes=dtypes, y=y, loss_name=_loss_name(model), output_units=_output_units(model),
        )
        self._report(findings)

    def _check_batch(self, batch_size) -> None:
        self._report(checks.uneven_batch(batch_size, self.runtime.num_replicas,
                                         self.runtime._framework.SPLITS_UNEVEN_BATCHES))

    def _report(self, findings) -> None:
        for finding in findings:
            if finding.error:
                raise UsageError(finding.message)
            if finding.key not in self.warned:
                self.warned.add(finding.key)
                log.warn(finding.message)

    def _tell_placement(self, model, batch_size) -> None:
        """Once: the split of the batch and where the model's variables are, so the user sees it worked."""
        if self.placement_told:
            return
        self.placement_told = True
        replicas = self.runtime.num_replicas
        batch = batch_size or checks.KERAS_DEFAULT_BATCH_SIZE
        where = ""
        if model.variables:
            spanned = self.runtime._framework.devices_spanned(model.variables[0])
            where = f"; the model's variables span {spanned} device{'s' * (spanned > 1)}"
        log.info(f"fit: global batch {batch} = {batch // replicas} × {replicas} replica(s){where}")

    # --- Preparation ----------------------------------------------------------------------------

    def _prepare_fit(self, arguments) -> None:
        split = arguments.pop("validation_split", 0.0) or 0.0
        x, y, weights = arguments.get("x"), arguments.get("y"), arguments.get("sample_weight")
        if split:
            # Split as Keras does (the last fraction, before shuffling), so both halves are prepared here.
            cut = int(data.num_samples(x) * (1 - split))
            arguments["validation_data"] = (data.take(x, slice(cut, None)), data.take(y, slice(cut, None)))
            x, y, weights = data.take(x, slice(0, cut)), data.take(y, slice(0, cut)), data.take(weights, slice(0, cut))
        replicas, processes = self.runtime.num_replicas, self.runtime.num_processes
        # Every process must take the same number of steps, each batch splitting over its devices.
        n = data.num_samples(x)
        keep = n - n % replicas
        if keep < n and processes == 1 and "trimmed" not in self.warned:
            self.warned.add("trimmed")
            log.info(f"left out the last {n - keep} training sample(s) so every batch divides over {replicas} replicas")
        x, y, weights = (self._own_slice(data.take(a, slice(0, keep))) for a in (x, y, weights))
        arguments.update(x=x, y=y, sample_weight=weights)
        validation = arguments.get("validation_data")
        if isinstance(validation, tuple) and len(validation) in (2, 3) and data.is_arrays(validation[0]):
            arguments["validation_data"] = tuple(self._own_slice(a) for a in self._repeated(validation))
        self._globalise_batch_size(arguments, "batch_size", "validation_batch_size")

    def _prepare_evaluate(self, arguments) -> None:
        parts = self._repeated((arguments.get("x"), arguments.get("y"), arguments.get("sample_weight")))
        arguments["x"], arguments["y"], arguments["sample_weight"] = (self._own_slice(a) for a in parts)
        self._globalise_batch_size(arguments, "batch_size")

    def _repeated(self, arrays):
        """The whole set k times over so its size divides over the replicas: every sample counts k times,
        so every mean or ratio metric is that of the set itself (nothing dropped)."""
        n = data.num_samples(arrays[0])
        k = self.runtime.num_replicas // math.gcd(n, self.runtime.num_replicas)
        if k == 1:
            return arrays
        return tuple(data.repeat(a, k) for a in arrays)

    def _own_slice(self, array):
        """This process's share, every num_processes-th sample: Keras joins the shares into global batches."""
        return data.process_share(array, self.runtime.process_index, self.runtime.num_processes)

    def _globalise_batch_size(self, arguments, *names) -> None:
        """Keras batches each process's slice: a global batch B is B / num_processes from each."""
        processes = self.runtime.num_processes
        if processes == 1:
            return
        global_batch = arguments.get("batch_size") or checks.KERAS_DEFAULT_BATCH_SIZE
        for name in names:  # validation_batch_size defaults to batch_size, as in Keras
            batch = arguments.get(name) or global_batch
            arguments[name] = batch // processes  # divisible: a multiple of the replicas, checked first


def _loss_name(model) -> str | None:
    loss = getattr(model, "loss", None)
    if isinstance(loss, str):
        return loss
    return getattr(loss, "name", None) or getattr(loss, "__name__", None)


def _output_units(model) -> int | None:
    try:
        shape = model.output_shape
    except (AttributeError, ValueError, RuntimeError):
        return None
    if isinstance(shape, tuple) and shape and isinstance(shape[-1], int):
        return shape[-1]
    return None
