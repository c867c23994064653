"""`acceltrain launch --processes N SCRIPT.py`: one jax.distributed job of N processes on this machine.

Each process is `acceltrain run SCRIPT.py` told its place through ACCELTRAIN_* variables (the coordinator
is process 0 at 127.0.0.1 on a free port), so the multi-host path runs, and is tested, on one machine.
The launcher prefixes each process's lines with its index (a line every process says alike: once, "[all]"), and
when one process fails it stops the others: a job with a missing process would otherwise wait in its next
collective until JAX's heartbeat gives up, or forever in the first one. Its last line names the first failure's
cause, not the aborts of the processes that lost their peer.
"""

import collections
import contextlib
import dataclasses
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from acceltrain import backends, cluster, decisions, ledger, log, preemption, watchdog
from acceltrain.options import Checkpoints
from acceltrain.errors import UsageError, positive_int
from acceltrain.runtime import Settings

POLL_SECONDS = 0.2
STOP_GRACE_SECONDS = 5.0  # after SIGTERM, before SIGKILL
STACKS_SECONDS = 2.0  # for the other processes to write their stacks, once one stalled
# After a notice (SIGTERM, SIGUSR1) to the launcher, or a process's own exit 42: how long the processes get to
# agree on a step, save its checkpoint and exit before they are killed. GKE's default grace before its SIGKILL is
# 30 s (terminationGracePeriodSeconds); ACCELTRAIN_NOTICE_GRACE_SECONDS sets another (an engine's longer grace,
# a large model's save).
NOTICE_GRACE_SECONDS = 30.0
ENV_NOTICE_GRACE = "ACCELTRAIN_NOTICE_GRACE_SECONDS"


def launch(script: str, argv=(), *, processes: int, settings: Settings = Settings(),
           checkpoints: Checkpoints | None = None, autopilot: bool = True,
           verify: int | None = None, ledger_file=None) -> int:
    """Run SCRIPT in `processes` cooperating processes; returns 0 if all succeed, else 1 (2: bad usage;
    42, preemption.EXIT_RESTART: preempted with every process's checkpoint saved, or a process stalled: restart
    the job; 128 + N: stopped by signal N without a saved checkpoint): preemption.choose_job_exit. The connect flags
    (`settings`: platform, tpu, precision ...; the launcher is the job's coordinator), the checkpoint flags
    (`checkpoints`: its folder checked here) and `ledger_file` are passed on to each process (`acceltrain run`: each
    prints its own ledger line, and writes its own FILE.i.json), each value writing itself back (as_args)."""
    from acceltrain.commands import outputs
    from acceltrain.layout import verify as verification

    # 1. Everything that can be wrong is refused before a process starts.
    positive_int(processes, "--processes", ", e.g. 2")
    if not Path(script).is_file():
        raise UsageError(f"Received script {script!r}, which is not a file. Pass the path of a Python script.")
    backend_name = _backend_of_the_job(script, settings.backend, processes)
    settings = dataclasses.replace(settings.check(backend_name, processes), backend=backend_name)  # as --emit checks
    if checkpoints is not None:
        checkpoints.check_folder()
    verify = verification.check_steps(verify, processes)
    outputs.check_file_folder(ledger_file, "--ledger")

    # 2. Start the processes: the same command, each told its index.
    coordinator = f"127.0.0.1:{_free_port()}"
    command = [sys.executable, "-m", "acceltrain", "run", *settings.as_args()]
    command += [] if autopilot else ["--no-autopilot"]
    command += ["--verify", str(verify)] if verify is not None else []
    command += checkpoints.as_args() if checkpoints is not None else []
    if ledger_file is not None:
        command += ["--ledger", str(Path(ledger_file).resolve())]
    command += [script, *argv]
    log.info(f"launching {processes} processes of {Path(script).name}, coordinator {coordinator}"
             + (f"; Keras's progress shown from process 0 only (-v: every process's)"
                if processes > 1 and not log.is_verbose() else ""))
    children = []
    grace = _notice_grace()
    with _forwarded_signals(children) as received, _stall_reports() as stalled:
        for index in range(processes):
            children.append(subprocess.Popen(
                command, env=_child_env(coordinator, processes, index), stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, process_group=0, preexec_fn=_die_with_parent))
        writing = threading.Lock()  # one line at a time on the launcher's terminal, whichever process it is from
        every_process = log.is_verbose()  # -v: every process's Keras progress and start-up lines
        merged = {target: SameLines(target, processes, writing, progress_of_all=every_process)
                  for target in (sys.stdout, sys.stderr)}
        pumps = [threading.Thread(target=_prefix_lines, args=(stream, merged[target], index), daemon=True)
                 for index, child in enumerate(children)
                 for stream, target in ((child.stdout, sys.stdout), (child.stderr, sys.stderr))]
        for pump in pumps:
            pump.start()

        # 3. Watch: the first failure, or a signal to the launcher, stops them all.
        failed = []  # (index, exit code, whether it stalled) of the first process to end with an error
        try:
            code = _watch(children, received, stalled, grace, failed)
        finally:
            _stop(children)  # nothing outlives the launcher, whatever ended it
            for pump in pumps:
                pump.join(timeout=STOP_GRACE_SECONDS)
            for lines in merged.values():
                lines.flush()
    if failed:
        index, first_code, was_stalled = failed[0]
        log.warn(first_end(index, first_code, merged[sys.stderr].causes[index], processes, stalled=was_stalled,
                           resume=_resume_hint(checkpoints, script, argv)))
    return code


def first_end(index: int, code: int, cause: str | None, processes: int, *, stalled: bool, resume: str) -> str:
    """The launcher's last line: what the first process to end with an error did. Exit 42 with no stall is no
    failure: that process was stopped by a notice and saved its checkpoint (preemption.RESTART_MEANING)."""
    if code == preemption.EXIT_RESTART and not stalled:
        return (f"process {index} was stopped by a notice and saved its checkpoint (exit {code}: "
                f"{preemption.RESTART_MEANING}); to resume, rerun {resume}")
    return (f"process {index} failed first{': ' + cause if cause else ' (it printed no error)'}"
            f"{'; the errors of the others came after it' if processes > 1 else ''}")


def _resume_hint(checkpoints: Checkpoints | None, script: str, argv) -> str:
    """How a job stopped by a notice resumes: with launch's checkpoints, the same command plus --resume (as it
    is, where it had --resume); else the same command, the script resuming from its own checkpoints."""
    from acceltrain.commands import run_checkpoints

    if checkpoints is None:
        return "the same command (the script resumes from its own checkpoints)"
    command = (f"acceltrain launch ... --checkpoint-dir {shlex.quote(str(checkpoints.dir))} --resume "
               f"{shlex.join([str(script), *argv])}")
    return run_checkpoints.resume_hint(checkpoints, command)


def _watch(children, received, stalled=(), grace: float = NOTICE_GRACE_SECONDS, failed_first=None) -> int:
    ended = _exits_in_order(children)
    was_stalled = False
    while True:
        if stalled:  # a process's watchdog fired: every process's stacks, before any of them ends
            stalled.clear()
            was_stalled = True
            _ask_for_stacks(children)
        if received:  # the one place a notice to the launcher is acted on: passed on, waited for, decided
            signum = received[0]
            log.warn(f"{signal.Signals(signum).name} received: passed on to the {len(children)} processes, which get "
                     f"{grace:g} s to agree on a step, save its checkpoint and exit before they are killed")
            # SIGTERM whatever the notice: jax.distributed's preemption sync listens for SIGTERM, and each process
            # passes a SIGINT on as SIGTERM to itself anyway (resumable._deferred_signals).
            _stop(children, first=signal.SIGTERM if preemption.is_notice(signum) else signum, grace=grace)
            code, why = preemption.choose_job_exit(_final_exits(ended, children), len(children), notice=signum)
            log.info(f"launch: exit {code}: {why}")
            return code
        exits = list(ended)
        failed = [(index, code) for index, code in exits if code != 0]
        if failed:
            index, code = failed[0]  # the first to fail: the others may have failed for want of it
            if failed_first is not None:
                failed_first.append((index, code, was_stalled))
            running = sorted(set(range(len(children))) - {i for i, _ in exits})
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            if code == watchdog.EXIT_STALLED:
                how = "stalled" if was_stalled else f"was preempted (exit {code}: its checkpoint saved)"
            if running and code == preemption.EXIT_RESTART and not was_stalled:
                # A notice each process got itself (an engine signals them all): the others are saving the same
                # agreed step; they get the grace to finish it.
                log.warn(f"process {index} {how}; waiting up to {grace:g} s for the other {len(running)} to save "
                         "the same step and exit")
                _stop(children, first=None, grace=grace)
            elif running:
                log.warn(f"process {index} {how}; stopping the other {len(running)} running process(es) "
                         f"{running} so the job does not hang waiting for it")
                _stop(children)
            else:
                log.warn(f"process {index} {how}; no other process was still running")
                _stop(children)
            code, why = preemption.choose_job_exit(_final_exits(ended, children), len(children), stalled=was_stalled)
            return code
        if len(exits) == len(children):
            return 0
        time.sleep(POLL_SECONDS)


def _final_exits(ended, children) -> list:
    """(index, code) of every child once all have been waited for: in the order they ended as far as the waiting
    threads noted it, then the rest (their threads not yet run) by index."""
    exits = list(ended)
    seen = {index for index, _ in exits}
    return exits + [(index, child.returncode) for index, child in enumerate(children) if index not in seen]


def _notice_grace() -> float:
    """NOTICE_GRACE_SECONDS, or ACCELTRAIN_NOTICE_GRACE_SECONDS (checked: seconds, a number over 0)."""
    given = os.environ.get(ENV_NOTICE_GRACE)
    if given is None:
        return NOTICE_GRACE_SECONDS
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise UsageError(f"Received {ENV_NOTICE_GRACE}={given!r}. Expected seconds, a number over 0 (default "
                         f"{NOTICE_GRACE_SECONDS:g}), e.g. {ENV_NOTICE_GRACE}=120 for a save that takes a minute.")
    return seconds


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
    """watchdog.STALL_SIGNAL: each process writes its threads' stacks to stderr (run.py registers faulthandler on it)."""
    for child in children:
        if watchdog.STALL_SIGNAL is not None and child.poll() is None:
            child.send_signal(watchdog.STALL_SIGNAL)
    time.sleep(STACKS_SECONDS)


def _stop(children, first: int | None = signal.SIGTERM, grace: float = STOP_GRACE_SECONDS) -> None:
    """`first` (SIGTERM; None: no signal, a wait only), then SIGKILL after `grace` seconds, to the process group of
    every child: a child's own children (a data loader's workers) go with it."""
    for child in children:
        if first is not None and child.poll() is None:
            _signal_group(child, first)
    deadline = time.monotonic() + grace
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
    """watchdog.STALL_SIGNAL from a launched process: its stall watchdog fired (watchdog.py)."""
    reports: list = []
    if threading.current_thread() is not threading.main_thread() or watchdog.STALL_SIGNAL is None:
        yield reports
        return
    previous = signal.signal(watchdog.STALL_SIGNAL, lambda signum, frame: reports.append(signum))
    try:
        yield reports
    finally:
        signal.signal(watchdog.STALL_SIGNAL, previous)


@contextlib.contextmanager
def _forwarded_signals(children):
    """SIGTERM, SIGUSR1 (the notices: preemption.NOTICES) and SIGINT to the launcher are noted, and _watch passes
    them on to the children (which are in their own process groups, so a Ctrl-C in the terminal reaches the
    launcher only). A second Ctrl-C stops the children at once; a second notice changes nothing (an engine may
    repeat its notice while the checkpoint is written: the save goes on). The previous handlers are restored."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def note(signum, frame):
        if received and signum == signal.SIGINT:  # a second Ctrl-C: no more grace
            for child in children:
                _signal_group(child, signal.SIGKILL)
        elif received:
            log.info(f"{signal.Signals(signum).name} received again: the checkpoint of the agreed step is being "
                     "written; carrying on")
        received.append(signum)

    previous = {sig: signal.signal(sig, note) for sig in (*preemption.NOTICES, signal.SIGINT)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _child_env(coordinator: str, processes: int, index: int) -> dict:
    env = dict(os.environ)
    env.update({cluster.ENV_COORDINATOR: coordinator, cluster.ENV_NUM_PROCESSES: str(processes),
                cluster.ENV_PROCESS_ID: str(index), "PYTHONUNBUFFERED": "1", cluster.ENV_LAUNCHER_PID: str(os.getpid()),
                ledger.ENV_STARTED: repr(ledger.interpreter_start())})  # each process's ledger counts from the job's start
    # The children import this same acceltrain, wherever it was imported from (a checkout or site-packages).
    source_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source_root, env.get("PYTHONPATH")) if p)
    return env


_LINE_END = re.compile(rb"(?<=\n)|(?<=\r)(?!\n)")  # after a \n, or after a \r that does not start \r\n


def _prefix_lines(stream, lines: "SameLines", index: int) -> None:
    """Forward `stream` to `lines` line by line as each line ends, process `index`'s.

    A '\r' ends a line too: Keras's progress bar redraws one line with '\r' and ends it with '\n' only at
    the epoch's end, so waiting for '\n' would hold a whole epoch's bar back, and let another writer's line
    (Gloo's, on the same stream) land in its middle. The backspaces the bar sends before its '\r' are
    dropped: the '\r' alone returns to the line's start, and the prefix must not be erased. Foreign start-up
    lines (log.START_UP_NOISE: Gloo's "Rank 1 is connected to 1 peer ranks", which it prints on stdout, where
    each process's own noise filter does not look) are dropped as `run` drops them, unless -v.
    """
    pending = b""
    try:
        for chunk in iter(lambda: stream.read1(65536), b""):
            *ended, pending = _LINE_END.split(pending + chunk)
            for line in ended:
                _pass_on(lines, index, line)
        if pending:
            _pass_on(lines, index, pending)
    finally:
        lines.end(index)
        stream.close()


def _pass_on(lines: "SameLines", index: int, line: bytes) -> None:
    text = line.replace(b"\b", b"").decode(errors="replace")
    if log.is_verbose() or not log.is_start_up_noise(text):
        lines.add(index, text)


# A line of Keras's progress (keras/src/utils/progbar.py: "  3/200 ━━━…" or "    12/Unknown …" at verbose=1, redrawn
# with '\r' and ended with '\n' at the epoch's end; "200/200 - 1s - 5ms/step - loss: …" at verbose=2), its ANSI
# colours removed. ProgbarLogger's "Epoch 1/3" is not one: every process says it alike, and it is written once.
_KERAS_PROGRESS = re.compile(r"^\s*\d+/(\d+|Unknown)( |$)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def is_keras_progress(line: str) -> bool:
    return bool(_KERAS_PROGRESS.match(_ANSI.sub("", line).strip("\r\n")))


_ERROR_LINE = re.compile(r"^(acceltrain: error: .*|F\d{4} .*|[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Diverged|"
                         r"Stalled|Failed|Refused)\b.*)$")


class SameLines:
    """The lines of N processes to one stream (the launcher's stdout or stderr): a line every process says alike
    is written once, "[all] LINE", the others "[i] LINE", each process's in its own order. A process's next line
    goes out alone at once where every other process has said something since that is not it (their queues are not
    empty and do not hold it), else it waits for the silent ones up to HOLD_SECONDS (processes of one job say the
    same lines in step, but their start-up on a loaded machine can be seconds apart: 1 s was not enough here); a line
    that redraws itself ('\r', Keras's bar) goes out at once. With one process, every line at once. Keras's progress
    (its bar and each epoch's result line, is_keras_progress) is process 0's only, at once, as Lightning and
    Accelerate show rank 0's: the processes' bars would share one terminal line, each redraw over the other's
    (`progress_of_all`: every process's, -v). `causes[i]`: the last error process i wrote (an exception's line,
    acceltrain's error, XLA's fatal check), what the launcher names when i failed first."""

    HOLD_SECONDS = 10.0

    def __init__(self, target, processes: int, writing: threading.Lock, clock=time.monotonic,
                 progress_of_all: bool = False):
        self.target, self.writing, self.clock = target, writing, clock
        self.progress_of_all = progress_of_all
        self.queues = [collections.deque() for _ in range(processes)]  # (line, when it came)
        self.ended = [False] * processes
        self.causes = [None] * processes
        self._lock = threading.Lock()
        self._stop = threading.Event()
        if processes > 1:
            threading.Thread(target=self._tick, name="acceltrain-launch-lines", daemon=True).start()

    def add(self, index: int, line: str) -> None:
        if _ERROR_LINE.match(line.strip("\r\n")):
            self.causes[index] = line.strip("\r\n")
        if index != 0 and not self.progress_of_all and is_keras_progress(line):
            return
        with self._lock:
            self.queues[index].append((line, self.clock()))
            self._release()

    def end(self, index: int) -> None:
        with self._lock:
            self.ended[index] = True
            self._release()

    def flush(self) -> None:
        """Everything still held, each process's in order (the job is over)."""
        self._stop.set()
        with self._lock:
            self.ended = [True] * len(self.ended)
            self._release()

    def _tick(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                self._release()

    def _release(self) -> None:
        while True:
            heads = [queue[0][0] if queue else None for queue in self.queues]
            if len(heads) > 1 and heads[0] is not None and heads.count(heads[0]) == len(heads) \
                    and not heads[0].endswith("\r") and not is_keras_progress(heads[0]):
                self._write("all", heads[0])
                for queue in self.queues:
                    queue.popleft()
                continue
            waiting = [index for index, queue in enumerate(self.queues) if queue and self._goes_alone(index)]
            if not waiting:
                return
            index = min(waiting, key=lambda i: self.queues[i][0][1])  # the oldest first
            self._write(index, self.queues[index].popleft()[0])

    def _goes_alone(self, index: int) -> bool:
        line, came = self.queues[index][0]
        peers = [peer for peer in range(len(self.queues)) if peer != index]
        some_peer_done = any(self.ended[peer] and not self.queues[peer] for peer in peers)
        said_otherwise = all(self.queues[peer] and all(said != line for said, _ in self.queues[peer]) for peer in peers)
        return (not peers or line.endswith("\r") or is_keras_progress(line) or self.ended[index] or some_peer_done
                or said_otherwise
                or self.clock() - came >= self.HOLD_SECONDS)

    def _write(self, who, line: str) -> None:
        if line.strip("\r\n") == "" and not line.endswith("\n"):
            return  # only the bar's erasing: nothing to show
        with self.writing:
            self.target.write(f"[{who}] {line}")
            self.target.flush()


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
