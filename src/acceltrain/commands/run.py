"""`acceltrain run SCRIPT.py`: a plain Keras script, unchanged, on the hardware connect() finds.

    run_script("train.py", ["--epochs", "3"], simulate_devices=8)

1. connect() starts the backend (and jax.distributed, in a multi-process job) before the script imports
   Keras; 2. the distribution is made global (JAX) or the script runs in the strategy's scope
   (TensorFlow), so every model the script builds is distributed; 3. each fit and evaluate is checked
   (`checks.py`) and, in a multi-process job, fed this process's slice of the data; 4. the script runs
   as `__main__`, with its own argv, exit code and traceback; 5. at its end, one line says which of its Keras
   calls ran distributed, and when it fails, whether the failing call fails without acceltrain's hooks too.

With --checkpoint-dir, each of the script's fit calls trains through Runtime.fit's checkpointed path
instead, exact and resumable (run_checkpoints.py).
"""

import contextlib
import functools
import inspect
import os
import runpy
import shlex
import sys
import traceback
from collections import Counter
from pathlib import Path

import numpy as np

from acceltrain import checks, data, inputs, log, placement
from acceltrain.commands import run_checkpoints
from acceltrain.errors import AcceltrainError, UsageError
from acceltrain.runtime import connect, inputs_prepared, predict_prepared


def run_script(path: str, argv=(), *, backend: str | None = None, simulate_devices: int | None = None,
               distribution: str = "auto", platform: str = "auto", tpu: str | None = None,
               coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None,
               stall_timeout: float | None = None, device_memory: str | None = None, checkpoint_dir=None,
               resume: bool = False, checkpoint_every: str | None = None, keep_checkpoints: int | None = None,
               precision: str = "auto") -> int:
    """Run the Python file at `path` as `__main__` with sys.argv = [path, *argv]. Returns its exit code.
    With `checkpoint_dir`, its fit calls are checkpointed and resumable (run_checkpoints.py)."""
    script = Path(path)
    if not script.is_file():
        raise UsageError(f"Received script {path!r}, which is not a file. Pass the path of a Python "
                         "script, e.g. acceltrain run train.py --epochs 3")
    checkpointing = run_checkpoints.check_flags(checkpoint_dir, resume, checkpoint_every, keep_checkpoints)
    runtime = connect(backend, simulate_devices=simulate_devices, distribution=distribution, platform=platform,
                      tpu=tpu, coordinator=coordinator, num_processes=num_processes, process_id=process_id,
                      stall_timeout=stall_timeout, device_memory=device_memory, precision=precision)
    _never_outlive_the_job()
    if runtime.num_processes > 1:
        # Every process must draw the same initial weights (JAX checks, and stops, when they differ); a
        # script that seeds itself overrides this.
        runtime.seed(0)
    with contextlib.ExitStack() as stack:
        stack.callback(runtime.close)  # last out: the script's models stop following their placement
        stack.enter_context(_as_main_script(script, argv))
        stack.enter_context(runtime.scope())  # JAX: the global distribution; TF: the strategy's scope
        checkpointed = checkpointing and run_checkpoints.CheckpointedFits(
            runtime, checkpointing, _resume_command(checkpointing, script, argv))
        stack.enter_context(runtime.backend_module.fit_hook(FitGuard(runtime, checkpointed)))
        if runtime.num_processes > 1:
            stack.enter_context(_saving_whole(runtime))
        calls = stack.enter_context(KerasCalls(runtime).watching())  # outermost: sees each call as the script made it
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as exit:
            calls.tell_summary()
            return _exit_code(exit.code)
        except AcceltrainError:
            raise  # acceltrain's own message (a fit check, a stop on SIGTERM with the resume hint), printed by the CLI
        except Exception as error:  # the script's own failure: its traceback, from its own frames
            _print_script_traceback(error, script)
            calls.tell_whose(error, script)
            return 1
    calls.tell_summary()
    return 0


def _resume_command(flags, script: Path, argv) -> str:
    """How the user continues a stopped run: their command plus --resume (launch's, for a launched process)."""
    from acceltrain.commands.launch import ENV_LAUNCHER_PID

    verb = "launch" if os.environ.get(ENV_LAUNCHER_PID) else "run"
    script_and_args = shlex.join([str(script), *argv])
    return f"acceltrain {verb} ... --checkpoint-dir {shlex.quote(str(flags.folder))} --resume {script_and_args}"


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
    """The traceback as a plain run prints it: from the script's first frame on, without runpy's frames
    before it or acceltrain's between (the hooks it puts around Keras's fit in backends/)."""
    tb = error.__traceback__
    target = str(script.resolve())
    while tb is not None and str(Path(tb.tb_frame.f_code.co_filename).resolve()) != target:
        tb = tb.tb_next
    shown = traceback.TracebackException(type(error), error, tb or error.__traceback__)
    for exception in _chain(shown):
        exception.stack = traceback.StackSummary.from_list(
            [frame for frame in exception.stack if not _is_acceltrains(frame.filename)])
    print("".join(shown.format()), end="", file=sys.stderr)


def _chain(exception: traceback.TracebackException):
    """The exception and those it was raised from or while handling."""
    seen = []
    while exception is not None and exception not in seen:
        seen.append(exception)
        exception = exception.__cause__ or exception.__context__
    return seen


_PACKAGE = Path(__file__).resolve().parent.parent


def _is_acceltrains(filename: str) -> bool:
    return Path(filename).resolve().is_relative_to(_PACKAGE)


@contextlib.contextmanager
def _saving_whole(runtime):
    """In a job of several processes every process writes its own model.save/save_weights, as each host of
    a plain multi-host script does, so each reads back what it saved (load_model after a ModelCheckpoint
    into a TemporaryDirectory, whose path differs from process to process).

    Each copy is written under a temporary name in the target folder, then renamed onto the path (atomic
    on one file system). Where the processes share the folder (one machine, a shared disk) the path is
    replaced once per process, each time by a whole file of the same weights: they are replicated, every
    process holds them all, and JAX checks they agree when they are loaded back. A reader never sees half
    a file, and nothing else is left there. Weights split over the processes (fsdp) are refused before
    anything is written: no process holds them whole, and Keras's save would fail half-way through a file.
    What is not one local file (a folder with zipped=False, shards with max_shard_size, a remote path) is
    written by process 0 alone, the others writing theirs into a folder thrown away after; a file object
    is each process's own.
    """
    from acceltrain.backends import keras_internals

    told = []

    def whole(name, method):
        def save(model, filepath, *args, **kwargs):
            _refuse_split_weights(runtime, model, name, filepath)
            if not isinstance(filepath, (str, os.PathLike)):
                return method(model, filepath, *args, **kwargs)  # a file object: this process's own
            arguments = keras_internals.bound_arguments(method, model, (filepath, *args), kwargs)
            path = _one_local_file(arguments)
            if path is None:
                how = _write_by_process_0(runtime.process_index, method, model, arguments)
            elif path.exists() and arguments.get("overwrite") is False:
                return method(model, **arguments)  # Keras asks before overwriting, as it does plainly
            else:
                _write_then_rename(runtime.process_index, method, model, arguments, path)
                how = "written by every process, each to a temporary name renamed onto the path once whole"
            if name not in told:
                told.append(name)
                log.info(f"process {runtime.process_index}: model.{name}({str(filepath)!r}) {how}")

        return save

    with keras_internals.saving_replaced(whole):
        yield


def _refuse_split_weights(runtime, model, name: str, filepath) -> None:
    optimizer = getattr(model, "optimizer", None)
    variables = [*model.variables, *(optimizer.variables if optimizer is not None and name == "save" else [])]
    split = runtime.backend_module.split_over_processes(variables)
    if split:
        raise UsageError(
            f"Received model.{name}({str(filepath)!r}) in a job of {runtime.num_processes} processes, with {len(split)} "
            f"of the {len(variables)} weights split over the processes' devices ({runtime.distribution_name}; e.g. "
            f"{split[0]}): no process holds them whole, and Keras's {name} writes each weight whole from one host. "
            "Valid here: weights every process holds whole (--distribution data), or checkpoints written in shards, "
            "each process its own (acceltrain train, or Runtime.fit(checkpoint_dir=...): Orbax). Nothing was written.")


def _one_local_file(arguments) -> Path | None:
    """The path, when Keras writes one file on this machine's file system there; else None."""
    filepath = str(arguments.get("filepath"))
    if "://" in filepath:
        return None  # a remote path (gs://, hf://): no atomic rename there
    if arguments.get("zipped") is False or arguments.get("max_shard_size") is not None:
        return None  # a folder, or several files
    path = Path(filepath)
    return path if path.parent.is_dir() else None  # no folder: Keras fails (or not) as it does plainly


def _write_then_rename(process_index: int, method, model, arguments, path: Path) -> None:
    # The same name at the end: Keras reads the format from the file's extension.
    partial = path.with_name(f".acceltrain-partial-{process_index}-{os.getpid()}-{path.name}")
    try:
        method(model, **{**arguments, "filepath": str(partial), "overwrite": True})
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)  # a failed write leaves nothing behind


def _write_by_process_0(process_index: int, method, model, arguments) -> str:
    """Process 0 writes the path; the others save too (the weights are read in every process's save, in
    the same order), into a folder thrown away after, so no two processes write one path."""
    import tempfile

    if process_index == 0:
        method(model, **arguments)
        return "written by process 0"
    with tempfile.TemporaryDirectory(prefix="acceltrain-discarded-") as folder:
        method(model, **{**arguments, "filepath": str(Path(folder) / Path(str(arguments["filepath"])).name)})
    return "left to process 0, which writes"


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

        from acceltrain.backends import keras_internals

        trainer = trainer or keras_internals.trainer_class(keras.backend.backend())
        hooked = {name: getattr(trainer, name) for name in self.NAMES}
        for name, method in hooked.items():
            setattr(trainer, name, self._watched(trainer, name, method, hooked))
        try:
            yield self
        finally:
            for name, method in hooked.items():
                setattr(trainer, name, method)

    def _watched(self, trainer, name, method, hooked):
        from acceltrain.backends import keras_internals

        @functools.wraps(method)  # FitGuard reads Keras's signature through __wrapped__
        def call(model, *args, **kwargs):
            outermost = self._depth == 0
            self._depth += 1
            before = keras_internals.variable_values(model) if outermost else []
            try:
                with self.runtime.watchdog.watching(f"{name} (compiling and running the first step)"):
                    return method(model, *args, **kwargs)
            except AcceltrainError:
                raise  # acceltrain's own outcome (a fit check, a stop on SIGTERM): nothing to recheck
            except Exception as error:
                if outermost and self.failed is None:
                    rerun = keras_internals.put_back_values(before)
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


class FitGuard:
    """Called before each fit, evaluate and predict of the script (through the backend's fit_hook).

    Checks the call (each warning printed once), then prepares numpy inputs (inputs.py): the last few
    samples trimmed (fit), the set repeated (evaluate) or padded and cut back (predict) so every batch
    divides over the replicas, and in a multi-process job each process given its own share, so
    `batch_size` stays the global batch. With `checkpointed` (--checkpoint-dir), the script's fit calls
    are trained by it instead (Runtime.fit's resumable path).
    """

    def __init__(self, runtime, checkpointed=None):
        self.runtime = runtime
        self.checkpointed = checkpointed
        self.warned: set[str] = set()
        self.placement_told = False

    def __call__(self, name: str, model, args, kwargs):
        """fit and evaluate: the (args, kwargs) to call Keras with."""
        from acceltrain.backends import keras_internals

        if name == "fit":
            placement.report(self.runtime, model)  # what was sharded, once per model
        if inputs_prepared():
            return args, kwargs  # Runtime.fit's own call: its inputs and callbacks are set
        kwargs = self._watched(getattr(type(model), name), args, kwargs)
        arguments = keras_internals.bound_arguments(getattr(type(model), name), model, args, kwargs)
        if not data.is_arrays(arguments.get("x")) or inputs_prepared():
            return args, kwargs  # datasets and generators, or Runtime.fit's own call: Keras takes them as they are
        if name == "fit":
            classes = inputs.classes_of(model)
            self._check(arguments, classes)
            self._tell_placement(model, arguments.get("batch_size"))
            self._prepare_fit(arguments, classes)
        else:
            self._check_batch(arguments.get("batch_size"))
            self._prepare_evaluate(arguments)
        return (), arguments

    def fit(self, method, model, args, kwargs):
        """fit: Keras's `method` on the prepared inputs, or, with --checkpoint-dir, the checkpointed fit."""
        from acceltrain.backends import keras_internals

        if self.checkpointed is None or inputs_prepared():  # inputs_prepared: Runtime.fit's own epochs
            args, kwargs = self("fit", model, args, kwargs)
            return method(model, *args, **kwargs)
        placement.report(self.runtime, model)
        return self.checkpointed.fit(model, keras_internals.bound_arguments(method, model, args, kwargs))

    def _watched(self, method, args, kwargs) -> dict:
        """kwargs with the watchdog's StallWatch among the callbacks, where the watchdog is on."""
        if not self.runtime.watchdog.enabled:
            return kwargs
        from acceltrain.backends import with_callback
        from acceltrain.training.callbacks import StallWatch

        return with_callback(method, args, kwargs, StallWatch(self.runtime.watchdog))

    def predict(self, method, model, args, kwargs):
        """predict: Keras's outputs of exactly the script's samples, joined from every process."""
        from acceltrain.backends import keras_internals

        if inputs_prepared():
            return method(model, *args, **kwargs)
        kwargs = self._watched(method, args, kwargs)
        arguments = keras_internals.bound_arguments(method, model, args, kwargs)
        if not data.is_arrays(arguments.get("x")):
            return method(model, *args, **kwargs)
        self._check_batch(arguments.get("batch_size"))
        prepared = inputs.prepare_predict(self.runtime, arguments.pop("x"), batch_size=arguments.pop("batch_size", None))
        return predict_prepared(self.runtime, model, method, prepared, **arguments)

    # --- Checks ---------------------------------------------------------------------------------

    def _check(self, arguments, classes) -> None:
        x, y = arguments.get("x"), arguments.get("y")
        split = arguments.get("validation_split") or 0.0
        num_samples = int(data.num_samples(x) * (1 - split))
        dtypes = {"x": a for a in data.leaves(x)[:1]}  # the arrays: the float64 check times a conversion
        if isinstance(y, np.ndarray):
            dtypes["y"] = y
        findings = checks.check_fit(
            num_samples=num_samples, batch_size=arguments.get("batch_size"),
            steps_per_epoch=arguments.get("steps_per_epoch"), num_replicas=self.runtime.num_replicas,
            platform=self.runtime.platform, splits_unevenly=self.runtime.backend_module.SPLITS_UNEVEN_BATCHES,
            input_dtypes=dtypes, y=y, loss_name=classes.loss_name, output_units=classes.output_units,
        )
        self._report(findings)

    def _check_batch(self, batch_size) -> None:
        self._report(checks.uneven_batch(batch_size, self.runtime.num_replicas,
                                         self.runtime.backend_module.SPLITS_UNEVEN_BATCHES))

    def _report(self, findings) -> None:
        for finding in findings:
            if finding.error:
                raise UsageError(finding.message)
            if finding.key not in self.warned:
                self.warned.add(finding.key)
                log.warn(finding.message)

    def _tell(self, notes) -> None:
        for key, message in notes:
            if key not in self.warned:
                self.warned.add(key)
                log.info(message)

    def _tell_placement(self, model, batch_size) -> None:
        """Once: the split of the batch and where the model's variables are, so the user sees it worked."""
        if self.placement_told:
            return
        self.placement_told = True
        replicas = self.runtime.num_replicas
        batch = batch_size or checks.KERAS_DEFAULT_BATCH_SIZE
        where = ""
        if model.variables:
            spanned = self.runtime.backend_module.devices_spanned(model.variables[0])
            where = f"; the model's variables span {spanned} device{'s' * (spanned > 1)}"
        log.info(f"fit: global batch {batch} = {batch // replicas} × {replicas} replica(s){where}")

    # --- Preparation (inputs.py): the same path as Runtime.fit/evaluate, unchecked (checks.py warned) --

    def _prepare_fit(self, arguments, classes) -> None:
        fit = inputs.prepare_fit(
            self.runtime, arguments.get("x"), arguments.get("y"), batch_size=arguments.get("batch_size"),
            classes=classes, sample_weight=arguments.get("sample_weight"),
            validation_data=arguments.get("validation_data"),
            validation_split=arguments.pop("validation_split", 0.0) or 0.0,
            validation_batch_size=arguments.get("validation_batch_size"), checked=False)
        self._tell(fit.notes)  # said in every process, as in a one-process run
        arguments["x"], arguments["y"], arguments["sample_weight"] = fit.local()
        arguments.update(validation_data=fit.validation_data, batch_size=fit.local_batch_size)
        if fit.validation_batch_size is not None:
            arguments["validation_batch_size"] = fit.validation_batch_size

    def _prepare_evaluate(self, arguments) -> None:
        prepared = inputs.prepare_evaluate(self.runtime, arguments.get("x"), arguments.get("y"),
                                           batch_size=arguments.get("batch_size"),
                                           sample_weight=arguments.get("sample_weight"), checked=False)
        arguments["x"], arguments["y"], arguments["sample_weight"] = prepared.local()
        arguments["batch_size"] = prepared.local_batch_size
