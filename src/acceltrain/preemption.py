"""Preemption and hangs, decided: what a notice makes the job do, which process stopped, who is a straggler,
and what the job's exit code says. Each decision is one ordered function over plain values (decisions.py's
style), acted on in one place: the notice in resumable.py's training loop, the hang in watchdog.py, the job's
exit in commands/launch.py.

The restartable exit: EXIT_RESTART (42) means "preempted, a checkpoint saved, restart me" (xpk's convention:
its JobSets restart a job that exits 42). A job ends with it after a notice (SIGTERM, SIGUSR1: Slurm's
`--signal`) once every process has saved the checkpoint of one agreed step, and when a process stopped
making progress (a hang: nothing was lost that the newest checkpoint does not hold, and a restart is the way
out). Every other failure keeps a code an engine does not restart on (1: failed, 2: bad usage, 130: Ctrl-C).

The notice is agreed as Ray Train's just-in-time checkpoint is (one agreed step, one save, exit) and as
Orbax's ContinuousCheckpointingPolicy decides (on the primary host, the others follow): in a job of several
processes, jax.distributed's preemption sync point picks the step (sharded_checkpoint.preempted_at).

Neutral: no framework.
"""

import contextlib
import os
import signal
from dataclasses import dataclass

from acceltrain.errors import AcceltrainError

EXIT_RESTART = 42
# Signals that mean "you are about to be stopped": GKE's and a TPU VM's SIGTERM, Slurm's `--signal USR1@T`.
NOTICES = (signal.SIGTERM, signal.SIGUSR1)
RESTART_MEANING = "preempted, checkpoint saved, restart me"
# The stall watchdog's floor: a hang is named after at least this many idle seconds (watchdog.stall_bound). Kept
# here, below backends/, because jax.distributed's heartbeat bound is set above it (backends/jax/processes.py).
STALL_FLOOR_SECONDS = 60.0


def is_notice(signum: int) -> bool:
    return signum in NOTICES


def exit_code(signum: int) -> int:
    """The exit of a run a signal stopped after saving its checkpoint: EXIT_RESTART for a notice; else (Ctrl-C,
    a user's stop) what a shell reports for that signal, 128 + N, which no engine restarts on its own."""
    return EXIT_RESTART if is_notice(signum) else 128 + signum


class PreemptedOutsideTraining(AcceltrainError):
    """A notice came while no checkpointed training ran (before the first step, or between fits): nothing in flight
    to save; the newest checkpoint stands, and the job asks to be restarted."""

    def __init__(self, signum: int):
        self.signum = signum
        self.exit_code = EXIT_RESTART
        super().__init__(f"{signal.Signals(signum).name} received outside training (before its first step, or between "
                         "fits): nothing in flight to save; the newest checkpoint, if any, stands. Exit "
                         f"{EXIT_RESTART}: {RESTART_MEANING}.")


@contextlib.contextmanager
def ledger_told_when_preempted(window, tell):
    """A run stopped by a notice (exit 42) still says where its time went, the notice's save booked as preemption:
    the ledger is what an engine's restarts are weighed by. `window()`: the run's timeline window once open (None
    before); `tell(ledger)`: how the command says its ledger (`train`: its line; `run`: its line and --ledger file)."""
    try:
        yield
    except AcceltrainError as error:
        if getattr(error, "exit_code", None) == EXIT_RESTART and window() is not None and window().ledger is not None:
            tell(window().ledger)
        raise


@contextlib.contextmanager
def notices_outside_training():
    """Inside, a notice (NOTICES) raises PreemptedOutsideTraining, so a run with checkpoints stopped before its first
    step (starting JAX, loading data, compiling) ends with the restartable exit at once, not killed by the signal.
    The training loop takes the notices over while it runs (resumable._deferred_signals). In a job of several
    processes jax.distributed takes SIGTERM once it starts (its preemption sync point: the agreed step), and
    NoticeWatch ends the process where the loop's poll cannot: before its first step, outside fit, after fit."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def preempted(signum, frame):
        raise PreemptedOutsideTraining(signum)

    previous = {sig: signal.signal(sig, preempted) for sig in NOTICES}
    LOOP.watched = True
    try:
        yield
    finally:
        LOOP.watched = False
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# --- A notice at any moment, in a job of several processes -----------------------------------------------------
# jax.distributed owns SIGTERM there, and the training loop learns of a notice by polling the sync point at its steps,
# its validation batches and its epoch ends (resumable._StepSaver). Elsewhere nobody polls: a notice during the first
# compile, an evaluate outside fit or the script's code after fit waited for a poll that might never come, until the
# engine's SIGKILL, nothing said. NoticeWatch, a thread of each process, reads the agreed notice from the job's store
# and ends the process there, every process alike: each decides from the same numbers (choose_notice_action).

class LoopState:
    """Where this process stands, as the watch needs it: `watched` (a run with checkpoints: `run` or `train` with
    notices_outside_training), `started_at` (the poll count when a checkpointed training loop started; None outside
    one), `handled` (the loop stopped on the notice and saved: the watch has nothing left to do)."""

    def __init__(self):
        self.watched = False
        self.started_at: int | None = None
        self.handled = False
        self.leave = os._exit  # a job of several processes: its backend's, which leaves the job first (its barrier)


LOOP = LoopState()


def choose_notice_action(counters: dict[int, int], processes: int, started_at: int | None,
                         waited: float, wait_seconds: float = 10.0) -> tuple[str, str]:
    """What this process does on a notice agreed in its job, and why. `counters`: each process's poll count at the
    notice (jax.distributed's sync protocol publishes them); `started_at`: this process's poll count when its training
    loop started, None outside one. In order:
    1. "wait": some processes' counts are not published yet (the sync barrier gathers them), for up to wait_seconds;
    2. "loop": inside a training loop that has polled since it started (some count past started_at): the loop stops
       at the agreed poll, every process's checkpoint of one step, then exits 42;
    3. "exit": nothing in flight to save (before the loop's first poll: starting, compiling; outside fit: an evaluate,
       a predict, the script's code after fit): exit 42 now; the newest checkpoint stands.
    Every process gets the same counts, and its loop starts at the same count: all decide alike."""
    if len(counters) < processes and waited < wait_seconds:
        return "wait", f"{len(counters)} of {processes} processes' poll counts published"
    reached = max(counters.values(), default=0)
    if started_at is not None and reached > started_at:
        return "loop", f"in training, {reached - started_at} poll(s) into the loop: it stops at the agreed step"
    if started_at is not None:
        return "exit", "before the training loop's first step"
    return "exit", "outside training (an evaluate or predict outside fit, the script's code after fit)"


class NoticeWatch:
    """A daemon thread that asks `read()` (None, or the poll counts a notice made: backends' notice_counters) every
    POLL_SECONDS and acts on choose_notice_action: "exit" says one line and ends the process with EXIT_RESTART.
    Acts only in a run with checkpoints (LOOP.watched) and not once the loop has handled the notice."""

    POLL_SECONDS = 0.2

    def __init__(self, read, processes, say=None, leave=None, clock=None):
        import time

        self.read, self.processes, self.leave = read, processes, leave
        self.say = say or (lambda line: print(line, file=__import__("sys").stderr, flush=True))
        self.clock = clock or time.monotonic

    def start(self) -> None:
        import threading

        threading.Thread(target=self._watch, name="acceltrain-notice-watch", daemon=True).start()

    def _watch(self) -> None:
        import time

        first = None
        while True:
            time.sleep(self.POLL_SECONDS)
            if self.check(first) == "wait":
                first = first if first is not None else self.clock()

    def check(self, first_seen: float | None = None) -> str:
        """One look: "none" (no notice, or nothing to do), "wait", "loop" or "exit" (then the process is left)."""
        if not LOOP.watched or LOOP.handled:
            return "none"
        try:
            counters = self.read()
        except Exception:  # noqa: BLE001  (the job's store is gone: the job is ending; its own errors say why)
            return "none"
        if counters is None:
            return "none"
        waited = 0.0 if first_seen is None else self.clock() - first_seen
        action, why = choose_notice_action(counters, self.processes(), LOOP.started_at, waited)
        if action == "exit" and not LOOP.handled:
            leave_with_nothing_to_save(why, self.say, self.leave)
        return action


def leave_with_nothing_to_save(why: str, say=None, leave=None) -> None:
    """A notice agreed where nothing is in flight to save: one line, then EXIT_RESTART at once (the process's threads,
    the script's code after fit, a compile in progress: none is waited for)."""
    import sys

    line = (f"acceltrain: a notice (SIGTERM) reached the job {why}: nothing in flight to save; the newest "
            f"checkpoint, if any, stands. Exit {EXIT_RESTART}: {RESTART_MEANING}.")
    (say or (lambda text: print(text, file=sys.stderr, flush=True)))(line)
    sys.stdout.flush()
    (leave or LOOP.leave)(EXIT_RESTART)


# --- Engine notices that are not signals ------------------------------------------------------------------------
# Each becomes SIGTERM to this process, so it takes the one path a notice takes (in a job of several processes,
# jax.distributed's sync point agrees the step). UNTESTED against the real engines (none runs here): each source is
# a seam, tested with a fake.

NOTICE_CHECK_STEPS = 10  # the sources are asked at every 10th step, the same steps in every process (Ray's query
# is a barrier across workers: each must call it as often as the others)
MAINTENANCE_URL = "http://metadata.google.internal/computeMetadata/v1/instance/maintenance-event"


def choose_notice_sources(cloud_tpu_vm: bool, ray_train_worker: bool) -> tuple[list[str], str]:
    """Which engine notices to ask for, beside the signals, and why. In order: a Cloud TPU VM's maintenance event
    (its metadata server says TERMINATE_ON_HOST_MAINTENANCE before the host goes); a Ray Train worker's
    ray.train.get_preemption_info() (Ray's notice of a node being reclaimed)."""
    sources = (["tpu-maintenance"] if cloud_tpu_vm else []) + (["ray"] if ray_train_worker else [])
    if not sources:
        return [], "no engine notice here beyond the signals (SIGTERM, SIGUSR1)"
    return sources, "asked at every " + str(NOTICE_CHECK_STEPS) + "th step: " + ", ".join(sources)


def tpu_maintenance_pending(read) -> bool:
    """The metadata server's maintenance-event (`read(url)` -> its text): anything but NONE is a notice."""
    return read(MAINTENANCE_URL).strip() not in ("", "NONE")


def read_gce_metadata(url: str, timeout: float = 1.0) -> str:
    """A Google Compute Engine metadata value (a TPU VM's), or "" when the server does not answer in time."""
    import urllib.request

    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.read().decode()
    except (OSError, ValueError):
        return ""


def ray_preemption_pending(get_preemption_info) -> bool:
    """Ray Train's `ray.train.get_preemption_info()`: a PreemptionInfo (not None) is a notice."""
    return get_preemption_info() is not None


class EngineNotices:
    """The engine notices that are not signals, asked at the training loop's steps (resumable._StepSaver) every
    NOTICE_CHECK_STEPS steps; the first that says so sends SIGTERM to this process, once. `sources`: {name: a
    function returning True when a notice is given}; a source that raises is said once and asked no more."""

    def __init__(self, sources: dict, send=os.kill, say=print):
        self.sources, self.send, self.say = dict(sources), send, say
        self.sent = False

    def at_step(self, global_step: int) -> None:
        if self.sent or not self.sources or global_step % NOTICE_CHECK_STEPS:
            return
        for name, pending in list(self.sources.items()):
            try:
                given = pending()
            except Exception as error:  # noqa: BLE001  (an engine's query failed: the signals still work)
                self.say(f"acceltrain: warning: the {name} notice could not be read ({error}); asking it no more")
                del self.sources[name]
                continue
            if given:
                self.say(f"acceltrain: {name} notice at step {global_step}: stopping as on SIGTERM")
                self.sent = True
                self.send(os.getpid(), signal.SIGTERM)
                return


# --- Which process stopped making progress (watchdog.py, when it fires in a job of several processes) ---------

@dataclass(frozen=True)
class Beat:
    """What one process published last (watchdog.py, every poll while a fit, evaluate or predict runs).

    steps: steps it has finished in this run (every call's, counted alike by every process); last_step_at: when
    its last step finished, beat_at: when it published this (time.time() on its own host); host, phase: where
    it is, as watchdog.py names a phase ("fit, epoch 2, after step 3")."""

    steps: int
    last_step_at: float
    beat_at: float
    host: str = ""
    phase: str = ""
    in_step: bool | None = None  # inside a step (begun, not finished): where a collective waits; None: not said


def silent_after(poll_seconds: float) -> float:
    """How long without a published beat before a process counts as frozen (SIGSTOP, a dead host): its
    watchdog publishes at each step and every poll, so five polls missed, never under 5 s (a loaded host's thread
    runs late)."""
    return max(5.0, 5 * poll_seconds)


def choose_stopped(beats: dict[int, Beat | None], now: float, silent_seconds: float) -> tuple[int | None, str]:
    """The process that stopped making progress, and why it is that one; None when the beats cannot tell.

    `beats`: each process's last beat (None: it never published one). In order:
    1. a process that never published: it never reached a fit, evaluate or predict (another path through the
       script, a crash before it, a host that never came up);
    2. a process whose beats stopped (none for `silent_seconds`): frozen or gone (SIGSTOP, a dead host); the
       longest silent first;
    3. every process still beats: the one with the fewest steps (stuck outside the collective the others wait
       in: its own code, a callback, its input), if it is behind the others;
    4. at the same step, a process outside a step while the others are inside the next one (stuck after its last
       step, in a callback or its own code, while they wait for it in the next step's collective);
    5. none: every process beats at the same step, all inside it or all outside (all wait in one collective; its
       stacks say which).
    """
    name = lambda index: f"process {index}" + (f" (host {beats[index].host})" if beats.get(index) and beats[index].host else "")  # noqa: E731
    never = sorted(index for index, beat in beats.items() if beat is None)
    if never:
        return never[0], f"{name(never[0])} never started a fit, evaluate or predict that the others are in"
    silent = sorted((beat.beat_at, index) for index, beat in beats.items() if now - beat.beat_at >= silent_seconds)
    if silent:
        index = silent[0][1]
        beat = beats[index]
        return index, (f"{name(index)} stopped making progress at step {beat.steps} ({beat.phase or 'no phase'}): "
                       f"nothing from it for {now - beat.beat_at:.0f} s (frozen, or its host is gone)")
    fewest = min(beats.values(), key=lambda beat: beat.steps).steps
    behind = sorted(index for index, beat in beats.items() if beat.steps == fewest)
    if fewest < max(beat.steps for beat in beats.values()):
        index = behind[0]
        beat = beats[index]
        return index, (f"{name(index)} stopped making progress at step {beat.steps} ({beat.phase or 'no phase'}), "
                       f"its last step {now - beat.last_step_at:.0f} s ago, while the others reached step "
                       f"{max(b.steps for b in beats.values())} (alive, stuck outside the collective they wait in)")
    outside = sorted(index for index, beat in beats.items() if beat.in_step is False)
    if outside and any(beat.in_step for beat in beats.values()):
        index = outside[0]
        beat = beats[index]
        return index, (f"{name(index)} stopped making progress at step {beat.steps} ({beat.phase or 'no phase'}), "
                       f"its last step {now - beat.last_step_at:.0f} s ago, outside any step while the others are in "
                       "the next one (alive, stuck outside the collective they wait in)")
    return None, f"every process is alive at step {fewest}: all wait in one collective"


# --- Stragglers -----------------------------------------------------------------------------------------------

STRAGGLER_FACTOR = 1.5  # a process this many times slower than the median of the others, over WINDOW_STEPS
STRAGGLER_WINDOW_STEPS = 20


def choose_stragglers(own_seconds: dict[int, float], factor: float = STRAGGLER_FACTOR) -> tuple[list[int], str]:
    """The processes slower than the others by `factor`: `own_seconds`, each process's own time per step over the
    same window (the time it spent outside the collective waits: its input, its host work, its device's step).
    A process whose own time is over `factor` × the median of the others' is a straggler: every other process
    waits for it at each step. Fewer than 2 processes, or a zero median: none."""
    if len(own_seconds) < 2:
        return [], "one process: no other to compare with"
    slow = []
    for index, seconds in sorted(own_seconds.items()):
        others = sorted(value for other, value in own_seconds.items() if other != index)
        median = others[len(others) // 2] if len(others) % 2 else (others[len(others) // 2 - 1] + others[len(others) // 2]) / 2
        if median > 0 and seconds > factor * median:
            slow.append((index, seconds, median))
    if not slow:
        return [], f"no process took over {factor:g}× the others' own time per step"
    return [index for index, _, _ in slow], "; ".join(
        f"process {index} took {seconds * 1e3:.1f} ms of its own a step, {seconds / median:.1f}× the others' "
        f"{median * 1e3:.1f} ms (over {factor:g}×)" for index, seconds, median in slow)


# --- The job's exit (commands/launch.py) ----------------------------------------------------------------------

def choose_job_exit(exits: list[tuple[int, int]], processes: int, notice: int | None = None,
                    stalled: bool = False) -> tuple[int, str]:
    """The exit code of a launched job from its processes' (index, code), in the order they ended, and why.

    0. Ctrl-C (SIGINT) to the launcher: 130, whatever the processes saved;
    1. a notice to the launcher: 0 if every process exited 0 (the job ended before the notice took effect: its
       work is done); EXIT_RESTART if every process exited with it (each saved the agreed step, or had nothing in
       flight to save), else 128 + the signal (not every process saved: an engine should not count on the
       checkpoint);
    2. every process exited 0: 0;
    3. the first failure was the restartable exit (a process preempted, or a stall watchdog that named the
       process that stopped): EXIT_RESTART, whatever the others did once it was gone;
    4. the first failure was bad usage (2): 2; any other: 1.
    """
    codes = dict(exits)
    if notice is not None and not is_notice(notice):  # Ctrl-C: the user's stop, not an engine's to restart
        return 128 + notice, f"stopped by {signal.Signals(notice).name}"
    if notice is not None:
        if len(codes) == processes and all(code == 0 for code in codes.values()):
            return 0, "every process finished before the notice took effect"
        if len(codes) == processes and all(code == EXIT_RESTART for code in codes.values()):
            return EXIT_RESTART, f"every process saved the agreed step (exit {EXIT_RESTART}: {RESTART_MEANING})"
        short = sorted(index for index in range(processes) if codes.get(index) != EXIT_RESTART)
        return 128 + notice, f"process(es) {short} did not exit {EXIT_RESTART} after the notice (no whole checkpoint " \
                             "is promised)"
    failed = [(index, code) for index, code in exits if code != 0]
    if not failed:
        return 0, "every process succeeded"
    index, code = failed[0]
    if code == EXIT_RESTART:
        why = "stalled" if stalled else "was preempted"
        return EXIT_RESTART, f"process {index} {why} (exit {EXIT_RESTART}: restart the job)"
    return (2 if code == 2 else 1), f"process {index} exited with code {code}"
