"""`acceltrain run SCRIPT.py`: a plain Keras script, unchanged, on the hardware connect() finds.

    run_script("train.py", ["--epochs", "3"], settings=Settings(simulate_devices=8))

1. connect() starts the backend (and jax.distributed, in a multi-process job) before the script imports
   Keras; 2. the distribution is made global (JAX), or what Keras needs made in the strategy's scope is made there
   (TensorFlow: its variables, a model's and an optimizer's strategy; the rest of the script runs outside it, as
   written), so every model the script builds is distributed; 3. each fit and evaluate is checked
   (`checks.py`) and, in a multi-process job, fed this process's slice of the data; 4. the script runs
   as `__main__`, with its own argv, exit code and traceback; 5. at its end, one line says which of its Keras
   calls ran distributed, and when it fails, whether the failing call fails without acceltrain's hooks too.

With --checkpoint-dir, each of the script's fit calls is trained by the runtime's own loop instead, as
Runtime.fit's are, exact and resumable (run_checkpoints.py).
"""

import contextlib
import os
import runpy
import shlex
import sys
import time
from pathlib import Path

from acceltrain import decisions, log, opened, preemption, user_model
from acceltrain.commands import outputs, run_checkpoints
from acceltrain.commands.script_layers import FitGuard, KerasCalls
from acceltrain.errors import AcceltrainError, UsageError
from acceltrain.options import Checkpoints
from acceltrain.runtime import Settings


def run_script(path: str, argv=(), *, settings: Settings = Settings(),
               checkpoints: Checkpoints | None = None, autopilot: bool = True,
               verify: int | None = None, started: float | None = None, ledger_file=None) -> int:
    """Run the Python file at `path` as `__main__` with sys.argv = [path, *argv]. Returns its exit code.
    `settings`: connect()'s (runtime.Settings, from run's flags). With `checkpoints` (acceltrain.Checkpoints: the
    --checkpoint-dir flags; its folder checked here), its fit calls are checkpointed and resumable (run_checkpoints.py),
    each in its own folder DIR/fit-N. Before each model's
    first fit it is weighed and laid out, the levers applied unless `autopilot` is False, and with `verify` (N
    steps) checked against one device (FirstFits). At the end, one line says where the run's time went
    (acceltrain/ledger.py), counted from `started` (time.time(); the CLI passes the interpreter's start; default: this
    call's); `ledger_file`: also written there as JSON (in a job of several processes, each its own: the process
    index before the suffix, ledger.1.json)."""
    from acceltrain.layout import verify as verification

    started = time.time() if started is None else started
    script = Path(path)
    if not script.is_file():
        raise UsageError(f"Received script {path!r}, which is not a file. Pass the path of a Python "
                         "script, e.g. acceltrain run train.py --epochs 3")
    outputs.check_file_folder(ledger_file, "--ledger")
    verify = verification.check_steps(verify)
    if checkpoints is not None:
        checkpoints.check_folder()
    _keep_the_scripts_backend(script, settings.backend)
    users_environment = dict(os.environ)  # before connect() sets its variables: what a plain run gets
    runtime = settings.connect()
    connected = time.time()
    _never_outlive_the_job()
    if runtime.num_processes > 1:
        # Every process must draw the same initial weights (JAX checks, and stops, when they differ); a
        # script that seeds itself overrides this.
        runtime.seed(0)
    from acceltrain.backends import interception
    from acceltrain import assembly

    calls = KerasCalls(runtime, _plain_command(script, argv, runtime.backend),
                       judge=_plain_judge(script, argv, runtime, started, users_environment))
    window = None
    told = preemption.ledger_told_when_preempted(lambda: window,
                                                 lambda ledger: _tell_ledger(ledger, ledger_file, runtime))
    with told, contextlib.ExitStack() as stack:
        # Last out: its connect()'s hold given back (closed unless another call holds the same runtime: connect() in
        # this process with the same options gives it back), Keras's fit its own; a script's close() cannot close it
        stack.enter_context(opened.held_by_command(runtime))
        window = stack.enter_context(runtime.timeline.window(started, start_up_until=connected))
        stack.enter_context(_as_main_script(script, argv))
        # JAX: the global distribution; TF: Keras's objects made in the strategy's scope, the rest as the script wrote it
        stack.enter_context(runtime.scope(keras_only=True))
        stack.enter_context(_no_reload_of_keras(runtime.backend))
        # The script's Keras calls pass these layers, in interception.LAYERS's order, then the placement layer.
        # With --checkpoint-dir, each fit is trained by the runtime's own loop (slot "trained"), as Runtime.fit's is.
        plan = assembly.FitPlan(  # the script's own steps_per_execution, as a plain fit keeps it
            checkpoints=checkpoints, per_fit=True, keep_steps_per_execution=True, script=True,
            resume_hint=checkpoints and run_checkpoints.resume_hint(checkpoints, _resume_command(checkpoints, script, argv)))
        stack.enter_context(interception.layers(
            ledger=runtime.ledger_layer, script_calls=calls,
            autopilot=assembly.FirstFits(runtime, autopilot=autopilot, verify=verify),
            script_inputs=FitGuard(runtime, plan), inputs=assembly.Inputs(runtime, plan),
            trained=assembly.Trained(runtime, plan) if checkpoints else None))
        stack.enter_context(_saving(runtime))
        code = _run_main(script, calls)
    _tell_ledger(window.ledger, ledger_file, runtime)
    return code


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


def _resume_command(checkpoints, script: Path, argv) -> str:
    """How the user continues a stopped run: their command plus --resume (launch's, for a launched process)."""
    from acceltrain import cluster

    verb = "launch" if cluster.launcher_pid() is not None else "run"
    script_and_args = shlex.join([str(script), *argv])
    return f"acceltrain {verb} ... --checkpoint-dir {shlex.quote(str(checkpoints.dir))} --resume {script_and_args}"


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
    several processes: _whole, which reads Keras's own signature); there, too, Keras's BackupAndRestore's backup,
    deleted by every process at its fit's end, is deleted once whoever comes first."""
    from acceltrain.backends import keras_internals

    savers = [*([_without_tensorflow] if runtime.backend == "jax" else []),
              *([_whole(runtime)] if runtime.num_processes > 1 else [])]
    several = runtime.num_processes > 1
    with keras_internals.saving_replaced(*savers) if savers else contextlib.nullcontext(), \
            keras_internals.backups_deleted_by_any_process() if several else contextlib.nullcontext():
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
    from acceltrain.backends import interception

    told = []

    def whole(name, method):
        def save(model, filepath, *args, **kwargs):
            _refuse_split_weights(runtime, model, name, filepath)
            if not isinstance(filepath, (str, os.PathLike)):
                return method(model, filepath, *args, **kwargs)  # a file object: this process's own
            arguments = interception.bound_arguments(method, model, (filepath, *args), kwargs)
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
