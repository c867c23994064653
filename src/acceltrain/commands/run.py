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
import os
import runpy
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from acceltrain import checks, data, decisions, inputs, log, placement, user_model
from acceltrain.commands import outputs, run_checkpoints
from acceltrain.errors import AcceltrainError, UsageError
from acceltrain.runtime import connect, predict_prepared


def run_script(path: str, argv=(), *, backend: str | None = None, simulate_devices: int | None = None,
               distribution: str = "auto", platform: str = "auto", tpu: str | None = None,
               coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None,
               stall_timeout: float | None = None, device_memory: str | None = None, checkpoint_dir=None,
               resume: bool = False, checkpoint_every: str | None = None, keep_checkpoints: int | None = None,
               precision: str = "auto", autopilot: bool = True, verify: int | None = None,
               started: float | None = None, ledger_file=None) -> int:
    """Run the Python file at `path` as `__main__` with sys.argv = [path, *argv]. Returns its exit code.
    With `checkpoint_dir`, its fit calls are checkpointed and resumable (run_checkpoints.py). Before each model's
    first fit it is weighed and laid out, the levers applied unless `autopilot` is False, and with `verify` (N
    steps) checked against one device (FirstFits). At the end, one line says where the run's time went
    (acceltrain/ledger.py), counted from `started` (time.time(); the CLI passes the interpreter's start; default: this
    call's); `ledger_file`: also written there as JSON (in a job of several processes, each its own: the process
    index before the suffix, ledger.1.json)."""
    from acceltrain.training import verify as verification

    started = time.time() if started is None else started
    script = Path(path)
    if not script.is_file():
        raise UsageError(f"Received script {path!r}, which is not a file. Pass the path of a Python "
                         "script, e.g. acceltrain run train.py --epochs 3")
    outputs.check_file_folder(ledger_file, "--ledger")
    verify = verification.check_steps(verify, "--verify")
    checkpointing = run_checkpoints.check_flags(checkpoint_dir, resume, checkpoint_every, keep_checkpoints)
    _keep_the_scripts_backend(script, backend)
    users_environment = dict(os.environ)  # before connect() sets its variables: what a plain run gets
    runtime = connect(backend, simulate_devices=simulate_devices, distribution=distribution, platform=platform,
                      tpu=tpu, coordinator=coordinator, num_processes=num_processes, process_id=process_id,
                      stall_timeout=stall_timeout, device_memory=device_memory, precision=precision)
    connected = time.time()
    _never_outlive_the_job()
    if runtime.num_processes > 1:
        # Every process must draw the same initial weights (JAX checks, and stops, when they differ); a
        # script that seeds itself overrides this.
        runtime.seed(0)
    from acceltrain.backends import keras_internals
    from acceltrain.training import assembly, ledger_watch

    calls = KerasCalls(runtime, _plain_command(script, argv, runtime.backend),
                       judge=_plain_judge(script, argv, runtime, started, users_environment))
    window = None
    with _ledger_told_when_preempted(lambda: window, ledger_file, runtime), contextlib.ExitStack() as stack:
        stack.callback(runtime.close)  # last out: Keras's fit is its own again
        window = stack.enter_context(runtime.timeline.window(started, start_up_until=connected))
        stack.enter_context(_as_main_script(script, argv))
        stack.enter_context(runtime.scope())  # JAX: the global distribution; TF: the strategy's scope
        stack.enter_context(_no_reload_of_keras(runtime.backend))
        # The script's Keras calls pass these layers, in keras_internals.LAYERS's order, then the placement layer.
        # With --checkpoint-dir, each fit is trained by the runtime's own loop (slot "trained"), as Runtime.fit's is.
        watch = ledger_watch.layer(runtime.timeline, runtime.backend_module, runtime.distribution) \
            if runtime.timeline.enabled else None
        trained = checkpointing and assembly.Trained(runtime, assembly.FitPlan(
            checkpoints=run_checkpoints.checkpointing(checkpointing, _resume_command(checkpointing, script, argv)),
            keep_steps_per_execution=True, flags=True))  # the script's own steps_per_execution, as a plain fit keeps it
        stack.enter_context(keras_internals.layers(
            ledger=watch, script_calls=calls, autopilot=assembly.FirstFits(runtime, autopilot=autopilot, verify=verify,
                                                                           flags=True),
            script_inputs=FitGuard(runtime, fits=not trained), trained=trained or None))
        stack.enter_context(_saving(runtime))
        code = _run_main(script, calls)
    _tell_ledger(window.ledger, ledger_file, runtime)
    return code


@contextlib.contextmanager
def _ledger_told_when_preempted(window, ledger_file, runtime):
    """A run stopped by a notice (exit 42) still says where its time went, the notice's save booked as preemption:
    the ledger is what an engine's restarts are weighed by."""
    from acceltrain import preemption

    try:
        yield
    except AcceltrainError as error:
        if getattr(error, "exit_code", None) == preemption.EXIT_RESTART and window() is not None:
            _tell_ledger(window().ledger, ledger_file, runtime)
        raise


def _run_main(script: Path, calls) -> int:
    """The script, run as __main__: its exit code, after the line saying what ran distributed (or, when the script
    raised, its traceback and whose error it is)."""
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exit:
        calls.tell_summary()
        return _exit_code(exit.code)
    except AcceltrainError:
        raise  # acceltrain's own message (a fit check, a stop on SIGTERM with the resume hint), printed by the CLI
    except Exception as error:  # the script's own failure: its traceback, from its own frames
        user_model.print_traceback(error, script)
        calls.tell_whose(error)
        return 1
    calls.tell_summary()
    return 0


def _tell_ledger(ledger, ledger_file, runtime) -> None:
    """The run's ledger in one line, and as JSON in `ledger_file` (process i of a job: FILE.i.json)."""
    if ledger is None:  # ACCELTRAIN_LEDGER=0
        return
    log.info(ledger.line())
    if ledger_file is not None:
        path = Path(ledger_file)
        if runtime.num_processes > 1:
            path = path.with_name(f"{path.stem}.{runtime.process_index}{path.suffix}")
        outputs.write_json(path, ledger.as_json())


def _keep_the_scripts_backend(script: Path, backend: str | None) -> None:
    """The Keras backend the script chooses for itself (script_source.py), kept as a plain run keeps it: applied to
    KERAS_BACKEND before connect() loads Keras, and said. `--backend` overrules it, in words. A launched process
    says nothing: the launcher chose the job's backend, and said why."""
    from acceltrain import cluster, script_source

    choice = script_source.backend_choice(script.read_text(errors="replace"))
    if choice is None or cluster.launcher_pid() is not None:
        return
    env = os.environ.get("KERAS_BACKEND")
    if choice.backend is None:
        log.warn(f"the script chooses its Keras backend as it runs (line {choice.line}: {choice.said}), which acceltrain cannot read "
                 "before: Keras is loaded first, with the backend the next line names. To choose it, pass --backend "
                 "jax or --backend tensorflow.")
    elif backend is not None and backend != choice.over(env):
        log.warn(f"the script sets its Keras backend on line {choice.line} ({choice.said}); --backend {backend} overrules it (acceltrain loads "
                 "Keras before the script runs). To keep the script's, leave out --backend.")
    elif backend is None and choice.over(env) != env:
        os.environ["KERAS_BACKEND"] = choice.over(env)
        log.info(f"run: the script sets its Keras backend on line {choice.line} ({choice.said}): applied before Keras loads, as a plain run "
                 "applies it")


@contextlib.contextmanager
def _no_reload_of_keras(backend: str):
    """Inside, the script's keras.config.set_backend(NAME) does not reload Keras: Keras's own drops every keras
    module, and what the script built after it would bypass acceltrain. NAME was read from the source and loaded
    before the script ran (_keep_the_scripts_backend): nothing to do; another one is refused, naming the flag."""
    from acceltrain.backends import keras_internals

    def kept(keras_own):
        def set_backend(name):
            if name != backend:
                raise UsageError(f"Received keras.config.set_backend({name!r}) from the script, with Keras loaded on "
                                 f"{backend} before it ran (a backend chosen as the script runs cannot be read before). "
                                 f"Pass --backend {name}.")

        return set_backend

    with keras_internals.set_backend_replaced(kept):
        yield


def _plain_command(script: Path, argv, backend: str) -> str:
    """The command that runs the script as it ran here, without acceltrain: this interpreter, the script's own
    arguments, and the Keras backend it ran on (KERAS_BACKEND: whatever chose it, the user's environment, the
    script or the default, the plain run then takes the same; where the script sets another one itself, --backend
    overruled it here, and the command loads Keras on this one first: plain_check.shown)."""
    from acceltrain.commands import plain_check

    return plain_check.shown(script, argv, backend)


def _plain_judge(script: Path, argv, runtime, started: float, environment: dict):
    """KerasCalls's judge: the script run plainly in a fresh process, up to its failed call, where
    decisions.choose_plain_recheck allows (said in one line); else why not."""
    from acceltrain.commands import plain_check

    def judge(name: str, nth: int):
        seconds, reason = decisions.choose_plain_recheck(runtime.num_processes, runtime.platform, time.time() - started)
        if seconds is None:
            return reason
        log.info(f"model.{name} failed; running the script without acceltrain in a fresh process, up to that call, to "
                 f"tell whose error it is ({reason})")
        return plain_check.judge(script, argv, runtime.backend, name, nth, seconds, environment)

    return judge


def _resume_command(flags, script: Path, argv) -> str:
    """How the user continues a stopped run: their command plus --resume (launch's, for a launched process)."""
    from acceltrain import cluster

    verb = "launch" if cluster.launcher_pid() is not None else "run"
    script_and_args = shlex.join([str(script), *argv])
    return f"acceltrain {verb} ... --checkpoint-dir {shlex.quote(str(flags.folder))} --resume {script_and_args}"


def _never_outlive_the_job() -> None:
    """Launched: end with the launcher; and show this process's stacks when asked (watchdog.STALL_SIGNAL), which the
    launcher does when another process stalled, so the job shows where each process stood."""
    from acceltrain import watchdog
    from acceltrain.commands.launch import watch_launcher

    watch_launcher()
    if watchdog.STALL_SIGNAL is not None:
        watchdog.show_stacks_on(watchdog.STALL_SIGNAL)


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


@contextlib.contextmanager
def _saving(runtime):
    """The script's model.save/save_weights through their one door (keras_internals.saving_replaced), outermost
    first: without the TensorFlow import (JAX: _without_tensorflow), then each process's own whole copy (a job of
    several processes: _whole, which reads Keras's own signature)."""
    from acceltrain.backends import keras_internals

    savers = [*([_without_tensorflow] if runtime.backend == "jax" else []),
              *([_whole(runtime)] if runtime.num_processes > 1 else [])]
    with keras_internals.saving_replaced(*savers) if savers else contextlib.nullcontext():
        yield


def _whole(runtime):
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

    return whole


def _without_tensorflow(name, method):
    """A JAX script's model.save/save_weights without the TensorFlow import Keras makes, where TensorFlow is
    installed, only to find no TensorFlow object in the model: seconds of the run (keras_internals.
    saving_without_tensorflow, as `acceltrain train` saves)."""
    from acceltrain.backends import keras_internals

    def save(model, *args, **kwargs):
        with keras_internals.saving_without_tensorflow():
            return method(model, *args, **kwargs)

    return save


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
    """Process 0 writes the path; the others save where nobody looks, so no two processes write one path."""
    from acceltrain.training.checkpoint import save_where_nobody_looks

    if process_index == 0:
        method(model, **arguments)
        return "written by process 0"
    save_where_nobody_looks(lambda path: method(model, **{**arguments, "filepath": str(path)}),
                            Path(str(arguments["filepath"])).name)
    return "left to process 0, which writes"


class KerasCalls:
    """Layer "script_calls" (keras_internals.LAYERS): the script's fit, evaluate and predict calls, as it made
    them: counted, and rechecked when one fails.

    When a call raises, the script's end says whose error it is: `judge(name, nth)` runs the same script plainly in
    a fresh process up to that call (plain_check.py) and returns its Verdict, or a string saying why it did not
    run (None: no judge).
    """

    def __init__(self, runtime, plain_command: str, judge=None):
        from acceltrain.backends import keras_internals

        self.runtime = runtime
        self.plain_command = plain_command  # how the user runs the script without acceltrain (_plain_command)
        self.judge = judge
        self.counts: Counter = Counter()
        self.undistributed: Counter = Counter()  # of those, the calls an inner layer ran on one device
        self.why_undistributed: list = []
        self._runtimes = keras_internals.runtimes_opened()  # more at the end: the script connected its own
        self.failed: tuple | None = None  # (name, error, which of the script's calls of that name it was)
        self._depth = 0  # a callback's own predict inside a fit: only the script's outermost calls count

    def __call__(self, call, proceed):
        from acceltrain.backends import keras_internals

        outermost = self._depth == 0
        self._depth += 1
        self.counts[call.name] += outermost
        before = keras_internals.variable_values(call.model) if outermost else []
        try:
            with self.runtime.watchdog.watching(f"{call.name} (compiling and running the first step)"):
                return proceed(call)  # armed from the start: Keras builds state (a collective) before any callback
        except AcceltrainError:
            raise  # acceltrain's own outcome (a fit check, a stop on SIGTERM): nothing to recheck
        except Exception as error:
            if outermost and self.failed is None:
                self.failed = (call.name, error, self.counts[call.name])  # judged once the script has ended
            keras_internals.put_back_values(before)  # a script that catches the error keeps a whole model
            raise
        finally:
            self._depth -= 1
            if outermost and call.undistributed:
                self.undistributed[call.name] += 1
                self.why_undistributed += [why.split(". ")[0] for why in call.undistributed
                                           if why.split(". ")[0] not in self.why_undistributed]

    def tell_whose(self, error: BaseException) -> None:
        """After the script's traceback: whether the failure is the script's or acceltrain's, as the same script run
        plainly in a fresh process says (`judge`), never the half-failed process itself."""
        if self.failed is None or self.failed[1] is not error:
            log.info(f"the error was raised in the script's own code, outside fit/evaluate/predict; to see whether "
                     f"it fails without acceltrain too, run: {self.plain_command}")
            return
        name, _, nth = self.failed
        verdict = self.judge(name, nth) if self.judge is not None else None
        which = f"model.{name} (the script's call {nth} of {name})"
        if verdict is None or isinstance(verdict, str):
            why = f" ({verdict})" if verdict else ""
            log.info(f"{which} failed; not run again without acceltrain{why}. To tell whose error it is, run: "
                     f"{self.plain_command}")
        elif verdict.outcome == "passed":
            log.warn(f"{which} fails only under acceltrain: the same script run without acceltrain, in a fresh process, "
                     "makes that call and it succeeds. This is acceltrain's bug, not the script's: please report it "
                     f"with this output. The plain run: {self.plain_command}")
        elif verdict.outcome == "failed" and verdict.error_type == type(error).__name__:
            log.info(f"{which} fails the same way without acceltrain ({verdict.error_type} in the same script run "
                     "plainly, in a fresh process): the error is the script's, not acceltrain's.")
        elif verdict.outcome == "failed":
            log.info(f"{which} fails without acceltrain too, but differently ({verdict.error_type}: {verdict.message}, "
                     f"in the same script run plainly, in a fresh process): most likely the script's error; to "
                     f"compare, run: {self.plain_command}")
        elif verdict.outcome == "timed out":
            log.info(f"{which} failed; the same script run without acceltrain had not reached that call when its time "
                     f"was up, so there is no verdict. To tell whose error it is, run: {self.plain_command}")
        else:
            elsewhere = f" (it raised {verdict.error_type}: {verdict.message})" if verdict.error_type else ""
            log.info(f"{which} failed; the same script run without acceltrain, in a fresh process, never made that "
                     f"call{elsewhere}, so there is no verdict. To compare, run: {self.plain_command}")

    def tell_summary(self) -> None:
        """One line at the end: what acceltrain distributed, or that it distributed nothing, and why."""
        from acceltrain.backends import keras_internals

        where = (f"{self.runtime.distribution_name} over {self.runtime.num_replicas} replica(s)"
                 if self.runtime.distribution is not None else "one device")
        own = ("; the calls of the runtime the script connected itself ran as its banner says"
               if keras_internals.runtimes_opened() > self._runtimes else "")
        if self.counts:
            made, alone = _listed(self.counts), _listed(self.undistributed)
            why = "; ".join(self.why_undistributed)
            if not alone:
                log.info(f"run: the script's Keras calls ({made}) ran on {where}{own}")
            elif self.undistributed == self.counts:
                log.info(f"run: the script's Keras calls ({made}) ran on one device, undistributed ({why}){own}")
            else:
                log.info(f"run: the script's Keras calls ({made}) ran on {where}, but {alone} on one device, "
                         f"undistributed ({why}){own}")
        elif own:
            log.info(f"run: the script called no Keras fit, evaluate or predict itself{own}")
        else:
            log.info(f"run: the script called no fit, evaluate or predict, so nothing was distributed: its models' "
                     f"variables were placed by {where}, but a hand-written training loop runs as written, each "
                     "step on the whole batch (Keras's fit/evaluate/predict are what acceltrain splits)")


def _listed(counts) -> str:
    """'2 fit, 1 evaluate': the calls counted, in Keras's order."""
    return ", ".join(f"{counts[name]} {name}" for name in ("fit", "evaluate", "predict") if counts[name])


class FitGuard:
    """Layer "script_inputs" (keras_internals.LAYERS): each fit, evaluate and predict of the script, checked and
    its inputs prepared.

    Checks the call (each warning printed once), then prepares numpy inputs (inputs.py): the last few
    samples trimmed (fit), the set repeated (evaluate) or padded and cut back (predict) so every batch
    divides over the replicas, and in a multi-process job each process given its own share, so
    `batch_size` stays the global batch. Tensors are read as numpy; datasets, PyDatasets, generators and Grain
    loaders take the same rules batch by batch (_stream).
    """

    def __init__(self, runtime, fits: bool = True):
        """fits: False where the runtime's own loop prepares each fit (slot "trained": --checkpoint-dir)."""
        self.runtime, self.fits = runtime, fits
        self.warned: set[str] = set()
        self.placement_told = False

    def __call__(self, call, proceed):
        if call.name == "fit" and not self.fits:
            return proceed(call)
        if call.name == "fit":
            placement.report(self.runtime, call.model)  # what was sharded, once per model
        call = self._watched(call)
        call, arguments = self._tensors_as_arrays(call)
        if inputs.is_stream(arguments.get("x")):
            return self._stream(call, arguments, proceed)
        split, why = decisions.choose_batch_split(call.name, self._training_samples(arguments),
                                                  arguments.get("batch_size"), self.runtime.num_replicas,
                                                  self.runtime.backend_module.SPLITS_UNEVEN_BATCHES)
        op_by_op = self._op_by_op_in_processes(call.model)
        if op_by_op:  # before the inputs are split between the processes: each runs the whole call
            split, why = "one device", op_by_op
        if split == "one device":
            return self._on_one_device(call, arguments, why, proceed)
        if call.name == "predict":
            return self._predict(call, arguments, proceed)
        if call.name == "fit":
            classes = inputs.classes_of(call.model)
            self._check(arguments, classes)
            self._tell_placement(call.model, arguments.get("batch_size"))
            self._prepare_fit(arguments, classes)
        else:
            self._check_batch(arguments.get("batch_size"))
            self._prepare_evaluate(arguments)
        return proceed(call.replace(args=(), kwargs=arguments))

    def _on_one_device(self, call, arguments, why: str, proceed):
        """The call as the script made it, undistributed on one device (in a job of several processes, each
        process the same call with the same, whole inputs): no batch of it divides over the replicas."""
        if call.name == "fit" and data.is_arrays(arguments.get("x")):
            self._check(arguments, inputs.classes_of(call.model), num_replicas=1)
        head, _, advice = why.partition(". ")
        self._tell([(f"one device: {head}", f"{head}: such calls run undistributed, on one device, as the script "
                                            f"makes them (the plain run's math){'. ' + advice if advice else ''}")])
        call.undistributed.append(why)
        with self.runtime.backend_module.on_one_device(call.model):
            return proceed(call)

    @staticmethod
    def _tensors_as_arrays(call):
        """(call, its arguments by name), tensors (tf.Tensor, jax.Array) read into numpy arrays, so they take the
        arrays' rules (and predict's outputs are joined from every process as numpy's are)."""
        arguments = call.arguments()
        names = [name for name in ("x", "y", "sample_weight", "validation_data") if data.has_tensors(arguments.get(name))]
        if not names:
            return call, arguments
        arguments.update({name: data.tensors_as_numpy(arguments[name]) for name in names})
        return call.replace(args=(), kwargs=arguments), dict(arguments)

    def _stream(self, call, arguments, proceed):
        """A dataset, PyDataset, generator or Grain loader by the arrays' rules (inputs.py's streams): evaluate and
        predict read it into arrays; fit takes every batch made to divide over the replicas and this process's rows
        of it, or runs on one device where its batch does not divide."""
        runtime = self.runtime
        if runtime.num_processes == 1 and (runtime.num_replicas == 1 or runtime.backend_module.SPLITS_UNEVEN_BATCHES):
            return proceed(call)  # nothing to split, or TensorFlow splits an uneven batch itself
        if call.name != "fit":
            notes = []
            x, y, weights = inputs.stream_to_arrays(arguments.pop("x"), arguments.pop("steps", None), notes=notes)
            self._tell(notes)
            read = {"x": x} if call.name == "predict" else {"x": x, "y": y, "sample_weight": weights}
            return self(call.replace(args=(), kwargs={**arguments, **read}), proceed)
        batch = inputs.stream_batch_size(arguments["x"])
        split, why = ("split", "") if batch is None else decisions.choose_batch_split(
            "fit", batch, batch, runtime.num_replicas, runtime.backend_module.SPLITS_UNEVEN_BATCHES)
        op_by_op = self._op_by_op_in_processes(call.model)
        if op_by_op or split == "one device":
            return self._on_one_device(call, arguments, op_by_op or why, proceed)
        fit = inputs.prepare_fit(runtime, arguments["x"], arguments.get("y"),
                                 validation_data=arguments.get("validation_data"),
                                 validation_batch_size=arguments.get("validation_batch_size"),
                                 validation_steps=arguments.get("validation_steps"), checked=False)
        self._tell(fit.notes)
        if fit.validation_data is not arguments.get("validation_data"):
            arguments.pop("validation_steps", None)  # read whole into memory: its steps are its batches
            arguments["validation_batch_size"] = fit.validation_batch_size
        arguments.update(x=fit.x, validation_data=fit.validation_data)
        return proceed(call.replace(args=(), kwargs=arguments))

    def _op_by_op_in_processes(self, model) -> str | None:
        """Why Keras's op-by-op step of `model` must run on one device in this job of several processes, if it must
        (backends/jax.py::op_by_op_in_processes; one process: the placement layer runs it so)."""
        if self.runtime.num_processes <= 1:
            return None
        return self.runtime.backend_module.op_by_op_in_processes(model)

    @staticmethod
    def _training_samples(arguments) -> int:
        split = arguments.get("validation_split") or 0.0
        return int(data.num_samples(arguments.get("x")) * (1 - split))

    def _watched(self, call):
        """The call with the watchdog's StallWatch among its callbacks, where the watchdog is on."""
        if not self.runtime.watchdog.enabled:
            return call
        from acceltrain.training.callbacks import StallWatch

        return call.with_callback(StallWatch(self.runtime.watchdog))

    def _predict(self, call, arguments, proceed):
        """predict: Keras's outputs of exactly the script's samples, joined from every process."""
        self._check_batch(arguments.get("batch_size"))
        prepared = inputs.prepare_predict(self.runtime, arguments.pop("x"), batch_size=arguments.pop("batch_size", None))
        return predict_prepared(self.runtime, call.model,
                                lambda x, **kwargs: proceed(call.replace(args=(x,), kwargs=kwargs)), prepared, **arguments)

    # --- Checks ---------------------------------------------------------------------------------

    def _check(self, arguments, classes, num_replicas: int | None = None) -> None:
        """The fit-time checks (checks.py) of a fit over `num_replicas` (default: the runtime's)."""
        x, y = arguments.get("x"), arguments.get("y")
        num_samples = self._training_samples(arguments)
        dtypes = {}  # the arrays: the float64 check times their conversion, until it has spoken once
        if "float64_inputs" not in self.warned:
            leaves = data.leaves(x)
            dtypes = {"x" if len(leaves) == 1 else f"x[{i}]": leaf for i, leaf in enumerate(leaves)}
            if isinstance(y, np.ndarray):
                dtypes["y"] = y
        findings = checks.check_fit(
            num_samples=num_samples, batch_size=arguments.get("batch_size"),
            steps_per_epoch=arguments.get("steps_per_epoch"), num_replicas=num_replicas or self.runtime.num_replicas,
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
        from acceltrain.training import assembly

        batch = batch_size or checks.KERAS_DEFAULT_BATCH_SIZE
        where = ""
        if model.variables:
            spanned = self.runtime.backend_module.devices_spanned(model.variables[0])
            where = f"; the model's variables span {spanned} device{'s' * (spanned > 1)}"
        log.info(f"fit: {assembly.batch_said(batch, self.runtime.num_replicas, assembly.accumulated(model))}{where}")

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
                                           sample_weight=arguments.get("sample_weight"), checked=False,
                                           name="evaluate's x")
        self._tell([(f"evaluate {key}", message) for key, message in prepared.notes])  # a repeated set: once a run
        arguments["x"], arguments["y"], arguments["sample_weight"] = prepared.local()
        arguments["batch_size"] = prepared.local_batch_size
