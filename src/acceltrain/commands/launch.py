"""`acceltrain launch --processes N SCRIPT.py`: one jax.distributed job of N processes on this machine.

Each process is `acceltrain run SCRIPT.py` told its place through ACCELTRAIN_* variables (the coordinator
is process 0 at 127.0.0.1 on a free port), so the multi-host path runs, and is tested, on one machine.
The launcher prefixes each process's lines with its index, and when one process fails it stops the
others: a job with a missing process would otherwise wait in its next collective until JAX's heartbeat
gives up, or forever in the first one.
"""

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from acceltrain import backends, cluster, decisions, ledger, log, sharding, watchdog
from acceltrain.errors import UsageError, positive_int

POLL_SECONDS = 0.2
STOP_GRACE_SECONDS = 5.0  # after SIGTERM, before SIGKILL
STACKS_SECONDS = 2.0  # for the other processes to write their stacks, once one stalled


def launch(script: str, argv=(), *, processes: int, simulate_devices: int | None = None,
           backend: str | None = None, distribution: str = "auto", platform: str = "auto", tpu: str | None = None,
           precision: str = "auto", stall_timeout: float | None = None,
           device_memory: str | None = None, checkpoint_dir=None, resume: bool = False,
           checkpoint_every: str | None = None, keep_checkpoints: int | None = None, autopilot: bool = True,
           verify: int | None = None, ledger_file=None) -> int:
    """Run SCRIPT in `processes` cooperating processes; returns 0 if all succeed, else 1 (2: bad usage,
    watchdog.EXIT_STALLED: a process stalled, 128 + N: stopped by signal N). The connect flags (platform,
    tpu, precision ...), the checkpoint flags and `ledger_file` are passed on to each process (`acceltrain run`:
    each prints its own ledger line, and writes its own FILE.i.json)."""
    from acceltrain.commands import outputs, run_checkpoints
    from acceltrain.training import verify as verification

    # 1. Everything that can be wrong is refused before a process starts.
    positive_int(processes, "--processes", ", e.g. 2")
    if not Path(script).is_file():
        raise UsageError(f"Received script {script!r}, which is not a file. Pass the path of a Python script.")
    backend_name = _backend_of_the_job(script, backend, processes)
    stall_timeout = watchdog.check_timeout(stall_timeout, "--stall-timeout")
    decisions.check_distribution(distribution, backend_name)
    if device_memory is not None:
        sharding.parse_bytes(device_memory, "--device-memory")
    checkpointing = run_checkpoints.check_flags(checkpoint_dir, resume, checkpoint_every, keep_checkpoints)
    verify = verification.check_steps(verify, "--verify")
    if verify is not None and processes > 1:
        raise UsageError(f"Received --verify {verify} with --processes {processes}: the one-device run of the "
                         "verification needs every batch in one process. Verify with `acceltrain run --verify N` on "
                         "one host first, then launch without it.")
    outputs.check_file_folder(ledger_file, "--ledger")

    # 2. Start the processes: the same command, each told its index.
    coordinator = f"127.0.0.1:{_free_port()}"
    command = [sys.executable, "-m", "acceltrain", "run", "--backend", backend_name, "--distribution", distribution,
               "--platform", platform, "--precision", precision]
    if tpu is not None:
        command += ["--tpu", tpu]
    if device_memory is not None:
        command += ["--device-memory", device_memory]
    if simulate_devices is not None:
        command += ["--simulate-devices", str(simulate_devices)]
    command += ["--stall-timeout", f"{stall_timeout:g}"]
    command += [] if autopilot else ["--no-autopilot"]
    command += ["--verify", str(verify)] if verify is not None else []
    if checkpointing is not None:
        command += checkpointing.as_args()
    if ledger_file is not None:
        command += ["--ledger", str(Path(ledger_file).resolve())]
    command += [script, *argv]
    log.info(f"launching {processes} processes of {Path(script).name}, coordinator {coordinator}")
    children = []
    with _forwarded_signals(children) as received, _stall_reports() as stalled:
        for index in range(processes):
            children.append(subprocess.Popen(
                command, env=_child_env(coordinator, processes, index), stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, process_group=0, preexec_fn=_die_with_parent))
        writing = threading.Lock()  # one line at a time on the launcher's terminal, whichever process it is from
        pumps = [threading.Thread(target=_prefix_lines, args=(stream, target, index, writing), daemon=True)
                 for index, child in enumerate(children)
                 for stream, target in ((child.stdout, sys.stdout), (child.stderr, sys.stderr))]
        for pump in pumps:
            pump.start()

        # 3. Watch: the first failure, or a signal to the launcher, stops them all.
        try:
            code = _watch(children, received, stalled)
        finally:
            _stop(children)  # nothing outlives the launcher, whatever ended it
            for pump in pumps:
                pump.join(timeout=STOP_GRACE_SECONDS)
    return code


def _watch(children, received, stalled=()) -> int:
    ended = _exits_in_order(children)
    while True:
        if stalled:  # a process's watchdog fired: every process's stacks, before any of them ends
            stalled.clear()
            _ask_for_stacks(children)
        if received:
            signum = received[0]
            log.warn(f"{signal.Signals(signum).name} received: passed on to the {len(children)} processes, which get "
                     f"{STOP_GRACE_SECONDS:.0f} s to stop before they are killed")
            _stop(children, first=signum)
            return 128 + signum  # as a shell reports a process ended by that signal
        exits = list(ended)
        failed = [(index, code) for index, code in exits if code != 0]
        if failed:
            index, code = failed[0]  # the first to fail: the others may have failed for want of it
            running = sorted(set(range(len(children))) - {i for i, _ in exits})
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            if code == watchdog.EXIT_STALLED:
                how = "stalled"
            if running:
                log.warn(f"process {index} {how}; stopping the other {len(running)} running process(es) "
                         f"{running} so the job does not hang waiting for it")
            else:
                log.warn(f"process {index} {how}; no other process was still running")
            _stop(children)
            return code if code in (2, watchdog.EXIT_STALLED) else 1
        if len(exits) == len(children):
            return 0
        time.sleep(POLL_SECONDS)


def _exits_in_order(children) -> list:
    """(index, exit code) of each child, appended as it ends, by a thread per child: when one process fails
    and another fails at once for want of it (its collective's peer gone), the first is the one to name,
    and a poll every POLL_SECONDS would often see both at the same time."""
    ended: list = []
    for index, child in enumerate(children):
        threading.Thread(target=lambda index=index, child=child: ended.append((index, child.wait())),
                         name=f"acceltrain-wait-{index}", daemon=True).start()
    return ended


def _ask_for_stacks(children) -> None:
    """SIGUSR1: each process writes its threads' stacks to stderr (run.py registers faulthandler on it)."""
    for child in children:
        if hasattr(signal, "SIGUSR1") and child.poll() is None:
            child.send_signal(signal.SIGUSR1)
    time.sleep(STACKS_SECONDS)


def _stop(children, first: int = signal.SIGTERM) -> None:
    """`first` (SIGTERM), then SIGKILL after a grace period, to the process group of every child: a child's
    own children (a data loader's workers) go with it."""
    for child in children:
        if child.poll() is None:
            _signal_group(child, first)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for child in children:
        try:
            child.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            pass
    for child in children:
        _signal_group(child, signal.SIGKILL)  # also what a finished child may have left in its group
        child.wait()


def _signal_group(child, signum: int) -> None:
    try:
        os.killpg(child.pid, signum)  # each child leads its own group (process_group=0)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


@contextlib.contextmanager
def _stall_reports():
    """SIGUSR1 from a launched process: its stall watchdog fired (watchdog.py)."""
    reports: list = []
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGUSR1"):
        yield reports
        return
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: reports.append(signum))
    try:
        yield reports
    finally:
        signal.signal(signal.SIGUSR1, previous)


@contextlib.contextmanager
def _forwarded_signals(children):
    """SIGTERM and SIGINT to the launcher are noted, and _watch passes them on to the children (which are
    in their own process groups, so a Ctrl-C in the terminal reaches the launcher only). A second one
    stops the children at once. The previous handlers are restored."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def note(signum, frame):
        if received:  # the second: no more grace
            for child in children:
                _signal_group(child, signal.SIGKILL)
        received.append(signum)

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _child_env(coordinator: str, processes: int, index: int) -> dict:
    env = dict(os.environ)
    env.update({cluster.ENV_COORDINATOR: coordinator, cluster.ENV_NUM_PROCESSES: str(processes),
                cluster.ENV_PROCESS_ID: str(index), "PYTHONUNBUFFERED": "1", cluster.ENV_LAUNCHER_PID: str(os.getpid()),
                ledger.ENV_STARTED: repr(ledger.process_start())})  # each process's ledger counts from the job's start
    # The children import this same acceltrain, wherever it was imported from (a checkout or site-packages).
    source_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source_root, env.get("PYTHONPATH")) if p)
    return env


_LINE_END = re.compile(rb"(?<=\n)|(?<=\r)(?!\n)")  # after a \n, or after a \r that does not start \r\n


def _prefix_lines(stream, target, index: int, writing: threading.Lock) -> None:
    """Forward `stream` to `target` line by line as each line ends, each prefixed with "[index] ".

    A '\r' ends a line too: Keras's progress bar redraws one line with '\r' and ends it with '\n' only at
    the epoch's end, so waiting for '\n' would hold a whole epoch's bar back, and let another writer's line
    (Gloo's, on the same stream) land in its middle. The backspaces the bar sends before its '\r' are
    dropped: the '\r' alone returns to the line's start, and the prefix must not be erased.
    """
    pending = b""
    for chunk in iter(lambda: stream.read1(65536), b""):
        *lines, pending = _LINE_END.split(pending + chunk)
        _write_lines(lines, target, index, writing)
    _write_lines([pending] if pending else [], target, index, writing)
    stream.close()


def _write_lines(lines, target, index: int, writing: threading.Lock) -> None:
    for line in lines:
        text = line.replace(b"\b", b"").decode(errors="replace")
        if text.strip("\r\n") == "" and not text.endswith("\n"):
            continue  # only the bar's erasing: nothing to show
        with writing:
            target.write(f"[{index}] {text}")
            target.flush()


def _backend_of_the_job(script: str, backend: str | None, processes: int) -> str:
    """--backend, else the one the script ends with plainly (its own choice, script_source.py, over KERAS_BACKEND),
    else Keras's config, else JAX. TensorFlow in a job of several processes is refused, naming what chose it (the
    flag, the script's line, the variable): such a job trains on JAX only (Keras 3's fit fails under TensorFlow's
    MultiWorkerMirroredStrategy), and a script that sets TensorFlow itself may use TensorFlow's own API, which JAX
    would not run."""
    from acceltrain import script_source

    env = os.environ.get("KERAS_BACKEND")
    choice = script_source.backend_choice(Path(script).read_text(errors="replace")) if backend is None else None
    ended = choice.over(env) if choice is not None else env
    name, reason = decisions.choose_backend(backend, None, ended, backends.jax_importable(),
                                            backends.keras_config_backend())
    if processes > 1 and name == "tensorflow":
        if backend is not None:
            chosen, keep = "--backend tensorflow", "leave out --backend tensorflow (or pass --backend jax)"
        elif choice is not None and ended != env:
            chosen = f"{Path(script).name}, whose line {choice.line} sets its backend ({choice.said})"
            keep = (f"where its code runs on JAX too, change line {choice.line} to 'jax' (check it plainly first: "
                    f"python {script}) or pass --backend jax")
        else:
            chosen, keep = f"TensorFlow as the Keras backend ({reason})", "pass --backend jax"
        raise UsageError(
            f"Received acceltrain launch --processes {processes} with {chosen}. A job of several processes trains on "
            "JAX only: Keras 3's fit fails under TensorFlow's MultiWorkerMirroredStrategy (keras-team/keras#20585). "
            f"Valid: TensorFlow in one process over this host's devices (acceltrain run {script}), or, to launch, {keep}.")
    return name


def _free_port() -> int:
    """A port free now. Another program could take it before process 0 binds it; then the job fails
    at start with JAX's bind error, and a rerun picks another."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _die_with_parent() -> None:
    """Linux: the child gets SIGTERM if the launcher dies (even by SIGKILL), so no orphan keeps training.
    A child that does not end on it (stuck in a collective) is ended by watch_launcher."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def watch_launcher() -> None:
    """In a launched process: end it (SIGKILL) once the launcher has been gone for the grace period.

    PR_SET_PDEATHSIG's SIGTERM is not enough alone: a process deadlocked in a collective may never act on
    it (Python runs its handlers between bytecodes; XLA's own handler can block), and it exists on Linux
    only. A daemon thread polls the parent's pid instead, which works wherever os.getppid does.
    """
    launcher = cluster.launcher_pid()
    if launcher is None:
        return

    def watch():
        while os.getppid() == launcher:
            time.sleep(1.0)
        time.sleep(STOP_GRACE_SECONDS)  # time to act on SIGTERM (write a checkpoint) first
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="acceltrain-watch-launcher", daemon=True).start()
