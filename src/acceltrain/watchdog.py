"""The stall watchdog: ends a process in which training has stopped moving, and shows where it stood.

A multi-device or multi-process job that loses one participant does not fail: the others wait in their
next collective, for ever, with nothing printed (a process that never reached fit, a process with more
batches than the others, a dead host whose heartbeat has not run out). While a fit, evaluate or predict
is under way, each finished step and each change of phase is a beat; when none comes for
`timeout` seconds, the watchdog prints this process's Python stacks (every line prefixed by its process
index), says which phase stalled and what usually causes it, and ends the process with EXIT_STALLED (42, the
restartable exit: preemption.py). `acceltrain launch` then asks the other processes for their stacks and ends
the job with it.

In a job of several processes each watchdog publishes its process's beat (its steps, when it last finished one,
its host) every poll through the coordinator's key-value store (backends.JobHeartbeats); the one that fires
reads them all and names the process that stopped making progress, and at which step
(preemption.choose_stopped): a process frozen (SIGSTOP, a dead host) stops publishing; one stuck in its own
code publishes a step count behind the others'. Process 0's watchdog also says, once, a process whose own time
per step is over preemption.STRAGGLER_FACTOR × the others' (preemption.choose_stragglers).

Neutral: no framework. Armed only inside fit/evaluate/predict, so a script's own slow work (loading data
before fit, writing files after) never trips it.
"""

import collections
import contextlib
import faulthandler
import math
import os
import statistics
import sys
import tempfile
import threading
import time

from acceltrain import preemption

# Generous on purpose: the first step of a fit includes XLA's compile of the whole training step, and on a
# TPU for a large model that alone can take many minutes; a later step never takes that long. A hung job
# then costs this long, not the rest of the night. 0 turns the watchdog off.
DEFAULT_STALL_TIMEOUT = 1800.0
# The restartable exit (xpk restarts a job that exits 42): a hang loses nothing the newest checkpoint does not
# hold, and a restart is the way out. The launcher tells a stall from a notice by the stall report (STALL_SIGNAL).
EXIT_STALLED = preemption.EXIT_RESTART

CAUSES = ("a process that never reached this collective (it failed, or took another path through the "
          "script), uneven data (one process has more batches than the others, so it waits alone), or a dead "
          "or unreachable host")

# After the first steps, a wait for a beat this many times the longest seen so far (a step's, or a dispatch's of
# several steps) is not a slow step but a hang; never less than FLOOR_SECONDS (preemption.STALL_FLOOR_SECONDS), so a
# fast CPU run stuck at 0 % CPU is named in about a minute rather than after DEFAULT_STALL_TIMEOUT (issue 22), and a
# step that is slow now and then (a GC pause, a loaded machine: steps varied up to ~5× side by side here) stays far
# inside it.
FLOOR_SECONDS = preemption.STALL_FLOOR_SECONDS
STEP_MULTIPLE = 20
# A process that is working uses its CPU; one waiting in a collective does not: stuck in fit's first
# collective, a process used 0.3 % of a core (0.07 s of CPU in 20 s, load average ~1); compiling, writing a
# checkpoint or running a callback uses most of one. The adaptive bound counts only time spent below this
# share of a core, so a legitimately slow stretch between steps that computes (a new input shape compiling,
# a save every N steps, a slow per-batch callback) is left to --stall-timeout.
BUSY_SHARE_OF_A_CORE = 0.10
# The watchdog is a Python thread: if the main thread ever held the GIL while it hung (a C call that does
# not release it), the thread could not run. faulthandler's own C thread is its dead man's switch: re-armed
# at each poll for this long after the --stall-timeout bound, it dumps every stack and exits (code 1) only
# if the watchdog itself stopped polling. (Measured: while fit waited in a collective, a Python thread kept
# running every 5 s, so the GIL was free; a callback that sleeps inside ctypes.PyDLL holds it, and then only
# faulthandler speaks.)
BACKSTOP_SECONDS = 30.0


def stall_bound(timeout: float, slowest_step: float | None) -> tuple[float, str]:
    """'auto': how long a phase may go without a step before the watchdog ends the process, and why.

    `timeout`: --stall-timeout (the user's, or the default), always the upper bound. `slowest_step`: the
    longest wait between beats measured so far (a step's, or a dispatch's of several steps: the wait the bound is
    on), None until a phase's first step (which compiles) has finished and another has been timed; a phase that
    compiles or whose length steps do not predict (an epoch's end: validation, callbacks, a checkpoint) has None too.
    """
    if slowest_step is None:
        return timeout, f"the bound is --stall-timeout {timeout:g} s (a phase's first step may compile)"
    adaptive = max(FLOOR_SECONDS, STEP_MULTIPLE * slowest_step)
    rule = f"max({FLOOR_SECONDS:g} s, {STEP_MULTIPLE} × {slowest_step:.3g} s)"
    took = f"a step (or a dispatch of several) took at most {slowest_step:.3g} s so far"
    if adaptive >= timeout:
        return timeout, f"{took}: the bound is --stall-timeout {timeout:g} s, lower than {rule}"
    return adaptive, f"{took}: the bound is {rule}"


class Watchdog:
    """Watch a fit, evaluate or predict: `with watchdog.watching(phase):` around the call to Keras (from
    before Keras builds any state: Keras's fit builds the optimizer's and metrics' variables, which in a
    multi-process job is already a collective, before any callback runs); inside it, beat() after each
    step and enter(phase) at each change of phase (training/callbacks.py::StallWatch).

    Fires when no step came for stall_bound(...) seconds: --stall-timeout before a phase's first step and
    where steps do not predict the wait, else a bound that follows the measured step time.
    `clock`, `cpu_clock`, `exit` and `stream` are seams for tests.
    """

    def __init__(self, timeout: float, process_index: int = 0, *, clock=time.monotonic, cpu_clock=time.process_time,
                 exit=os._exit, stream=None, poll_seconds: float | None = None, heartbeats=None, wall_clock=time.time):
        self.timeout = float(timeout)
        self.process_index = process_index
        # heartbeats: backends.JobHeartbeats in a job of several processes (publish(index, dict), read() ->
        # {index: dict | None} | None); None alone. wall_clock: the time a beat carries (hosts compare it).
        self.heartbeats, self._wall = heartbeats, wall_clock
        self._total_steps, self._last_step_at = 0, wall_clock()
        # Executions begun (begin_step: Keras's batch begin, one for a step or for steps_per_execution's many) against
        # executions ended (a beat that ends one): whether it is inside one. Counted, not a flag: Keras may call the
        # batch ends from its callback thread, after the next execution's begin.
        self._begun = self._ended = 0
        self._straggling_said = False
        # This process's own CPU seconds of each of its last measured steps (from one beat to the next, the stretch
        # after a compile or an epoch's end left out), whose median its beat carries for the straggler check.
        self._step_cpu = collections.deque(maxlen=preemption.STRAGGLER_WINDOW_STEPS)
        self._cpu_at_beat: float | None = None
        self._clock, self._cpu_clock, self._exit, self._stream = clock, cpu_clock, exit, stream
        self._poll = poll_seconds if poll_seconds is not None else min(max(self.timeout / 20, 0.05), 1.0)
        self._lock = threading.Lock()
        self._phase: str | None = None  # None: disarmed
        self._depth = 0  # watching() nests: fit's validation, a callback's own evaluate
        self._last = self._busy_at = clock()
        self._cpu_seen = (self._last, cpu_clock())
        self._steps = 0
        self._slowest: float | None = None  # the longest step measured so far
        self._unmeasured = True  # the next step compiles, or the stretch until it is not a step: not timed
        self._thread: threading.Thread | None = None
        self._published_at = -math.inf  # when beat() last handed a beat to the heartbeats

    @property
    def enabled(self) -> bool:
        return self.timeout > 0

    @contextlib.contextmanager
    def watching(self, phase: str):
        """Armed inside (the outermost call arms it, and disarms it on the way out)."""
        if not self.enabled:
            yield self
            return
        self._depth += 1
        if self._depth == 1:
            self.arm(phase)
        try:
            yield self
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.disarm()

    def arm(self, phase: str) -> None:
        if not self.enabled:
            return
        with self._lock:  # each watched call starts afresh: its steps are another function's, maybe another model's
            self._phase, self._unmeasured, self._steps, self._slowest = phase, True, 0, None
            self._last = self._busy_at = self._clock()
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="acceltrain-stall-watchdog", daemon=True)
                self._thread.start()

    def enter(self, phase: str, *, unmeasured: bool = False) -> None:
        """A change of phase (not a step): the wait starts again. `unmeasured`: until its next step, the
        wait is not bounded by the step times (the phase compiles, or runs what steps do not predict)."""
        with self._lock:
            if self._phase is None:
                return
            self._phase, self._last, self._unmeasured = phase, self._clock(), unmeasured

    def beat(self, phase: str | None = None, steps: int = 1, *, ends_execution: bool = True) -> None:
        """`steps` steps finished since the last beat (a dispatch of many steps: as many; 0: a second beat of steps
        already heard, e.g. Keras's batch end after acceltrain's runner beat its dispatch: progress, no step). The
        step counts (the stall message's, the heartbeats') add `steps`: steps, however many a dispatch ran. The
        first after a phase that compiled is not timed: its time is the compile's. A step's CPU is the stretch's
        over its steps, so a straggler's "own time a step" is a step's however its steps were dispatched.
        `ends_execution` False: a dispatch inside an execution begun (begin_step) whose end beats later (Keras's
        batch end after acceltrain's runner's dispatches): the process is still inside it."""
        with self._lock:
            self._ended += ends_execution  # armed or not, as begin_step counts: the two pair up
            if self._phase is None:
                return
            now, cpu = self._clock(), self._cpu_clock()
            if not steps:  # nothing new trained: the CPU since the last beat stays with the next step's
                self._last = now
                if phase is not None:
                    self._phase = phase
                return
            if not self._unmeasured:
                # The longest silence between beats, whatever the beats cover: the bound (stall_bound) is on the wait
                # for the next beat, and beats come one a dispatch, so a dispatch of K steps is waited for K steps'
                # time (acceltrain's runner sizes a dispatch to about a second, backends/jax/resident.py). A bound
                # from the time a step, 20 × (dispatch / K), would end a healthy run whose dispatches hold over 20.
                self._slowest = max(self._slowest or 0.0, now - self._last)
                if self._cpu_at_beat is not None:
                    self._step_cpu.append((cpu - self._cpu_at_beat) / steps)
            self._cpu_at_beat = cpu
            self._last, self._unmeasured = now, False
            self._steps += steps
            self._total_steps += steps
            self._last_step_at = self._wall()
            if phase is not None:
                self._phase = phase
            # A step publishes only once a poll has passed since the last it published: the watch thread publishes
            # the latest beat every poll anyway, and the readers (a stall's _who_stopped, check_stragglers) ask
            # nothing fresher. Each publish is a write to the coordinator's store (an RPC on the publishing thread,
            # and on the coordinator's): every step, that was hundreds a second for a millisecond step under launch,
            # competing for the cores the step runs on (issue 33).
            publish = now - self._published_at >= self._poll
            if publish:
                self._published_at = now
        if publish:
            self._publish()  # a hand-over to the publishing thread only: the beat says the step it stopped at

    def begin_step(self) -> None:
        """A step begins, or an execution of several (Keras's batch begin; the beat() that ends it says it finished):
        between the two, a collective of its steps may wait for another process; a process stuck outside any step
        while the others are in one is the one they wait for."""
        with self._lock:
            self._begun += 1

    def disarm(self) -> None:
        with self._lock:
            self._phase = None
        self._publish(watching=False)

    def beat_now(self, watching: bool = True) -> dict:
        """This process's beat, as the others read it (preemption.Beat's fields, and whether it is in a watched call)."""
        with self._lock:
            return {"steps": self._total_steps, "last_step_at": self._last_step_at, "beat_at": self._wall(),
                    "host": _HOST, "phase": self._phase or "its own code, outside fit, evaluate and predict",
                    "watching": watching and self._phase is not None, "cpu_per_step": self._cpu_per_step(),
                    "in_step": self._begun > self._ended if self._begun else None}

    def _cpu_per_step(self) -> float | None:
        """The median of this process's own CPU seconds a step over its last STRAGGLER_WINDOW_STEPS measured steps
        (None before it has that many). A median, not a mean over a stretch: a one-off in one step (acceltrain's own
        timing of the step on one device compiles it again, once a process, after 50 steps; a process whose compile
        missed the cache the other hit) is not a straggler; a process slow at most of its steps is."""
        if len(self._step_cpu) < preemption.STRAGGLER_WINDOW_STEPS:
            return None
        return statistics.median(self._step_cpu)

    def _publish(self, watching: bool = True) -> None:
        if self.heartbeats is not None:
            self.heartbeats.publish(self.process_index, self.beat_now(watching))

    def stalled_for(self) -> float | None:
        """Seconds since the last beat while armed; None when disarmed."""
        with self._lock:
            return None if self._phase is None else self._clock() - self._last

    def check(self) -> bool:
        """Fire if stalled: True if it did (the exit seam returned instead of ending the process)."""
        now, cpu = self._clock(), self._cpu_clock()
        with self._lock:
            if self._phase is None:
                return False
            seen_at, cpu_then = self._cpu_seen
            if now > seen_at and (cpu - cpu_then) / (now - seen_at) > BUSY_SHARE_OF_A_CORE:
                self._busy_at = now
            self._cpu_seen = (now, cpu)
            waited, idle = now - self._last, now - max(self._last, self._busy_at)
            bound, why = stall_bound(self.timeout, None if self._unmeasured else self._slowest)
        if waited >= self.timeout:
            self._fire(waited, why if bound >= self.timeout else
                       f"the bound is --stall-timeout {self.timeout:g} s: this process kept its CPU busy, so the "
                       f"step-time bound did not apply ({why})")
        elif idle >= bound:
            self._fire(waited, f"{why}, and this process was idle (under {BUSY_SHARE_OF_A_CORE:.0%} of a core) "
                               f"for the last {int(idle)} s")
        else:
            return False
        return True

    def _watch(self) -> None:
        while True:
            with self._lock:
                if self._phase is None:  # disarmed: the thread ends; the next arm starts another
                    self._thread = None
                    faulthandler.cancel_dump_traceback_later()
                    return
                waited = self._clock() - self._last
            self._publish()
            if (stderr := _stderr_fd()) is not None:
                faulthandler.dump_traceback_later(max(self.timeout - waited, 0) + BACKSTOP_SECONDS, exit=True,
                                                  file=stderr)
            if self.check():
                return
            self.check_stragglers()
            time.sleep(self._poll)

    def _fire(self, waited: float, why: str) -> None:
        faulthandler.cancel_dump_traceback_later()  # the watchdog speaks: no backstop while it ends the process
        stream = self._stream or sys.stderr
        prefix = f"process {self.process_index}: "
        with self._lock:
            phase, steps = self._phase, self._steps
        progress = f"after {steps} step(s)" if steps else "before its first step"
        lines = [f"acceltrain: error: stalled: nothing moved for {int(waited)} s in {phase}, {progress}; {why}."]
        if (stopped := self._who_stopped()) is not None:
            lines.append(f"acceltrain: error: {stopped}.")
        lines.append(f"acceltrain: where it stood, thread by thread ({prefix.strip()} below):")
        launcher = _launcher_pid()
        if launcher is None:
            lines += [prefix + line for line in python_stacks().splitlines()]
        else:  # the launcher asks every process for its stacks, this one too, before any of them ends
            lines[-1] = "acceltrain: the launcher now asks every process for its stacks (lines [i] below)."
        lines += [f"acceltrain: usual causes: {CAUSES}. Ending this process (exit {EXIT_STALLED}: restart the job; "
                  "its newest checkpoint stands). A longer "
                  "first compile, or a longer wait between steps, needs a larger --stall-timeout (the upper "
                  "bound; 0 turns the watchdog off)."]
        print("\n".join(lines), file=stream, flush=True)
        sys.stdout.flush()
        if launcher is not None:
            os.kill(launcher, STALL_SIGNAL)
            time.sleep(LAUNCHER_STACKS_SECONDS)
        self._exit(EXIT_STALLED)


    def check_stragglers(self) -> list[int]:
        """Process 0, in a job of several processes, every poll: each process's own CPU time per step, the median of
        its last preemption.STRAGGLER_WINDOW_STEPS steps (its host's work and, on CPU devices, the step's compute; a
        wait in a collective uses none), and the processes over preemption.STRAGGLER_FACTOR × the others' said in one
        line, once a run. Returns the stragglers found by this call."""
        if self.heartbeats is None or self.process_index != 0 or self._straggling_said:
            return []
        read = self.heartbeats.read()
        if read is None:
            return []
        read[0] = self.beat_now()
        own = {index: beat.get("cpu_per_step") for index, beat in read.items() if beat is not None}
        if len(own) < len(read) or any(seconds is None for seconds in own.values()):
            return []  # a process has not published, or not yet that many steps
        slow, why = preemption.choose_stragglers(own)
        if slow:
            self._straggling_said = True
            print(f"acceltrain: warning: straggler: {why}, the median of each process's last "
                  f"{preemption.STRAGGLER_WINDOW_STEPS} steps; every other process waits for it at each step (its "
                  "input, its host's load, its device)", file=self._stream or sys.stderr, flush=True)
        return slow

    def _who_stopped(self) -> str | None:
        """In a job of several processes: which one stopped making progress, from every process's last beat."""
        if self.heartbeats is None:
            return None
        read = self.heartbeats.read()
        if read is None:
            return "the other processes' heartbeats could not be read (the coordinator, process 0, does not answer: " \
                   "it may be the one that stopped)"
        mine = self.beat_now()
        beats = {index: None if beat is None or not beat.get("watching") else
                 preemption.Beat(beat["steps"], beat["last_step_at"], beat["beat_at"], beat.get("host", ""),
                                 beat.get("phase", ""), beat.get("in_step"))
                 for index, beat in {**read, self.process_index: mine}.items()}
        index, why = preemption.choose_stopped(beats, self._wall(), preemption.silent_after(self._poll))
        return why if index is not None else f"no single process to name: {why}"


# The signal a stalled launched process sends its launcher, and the launcher sends every process for its stacks.
# Not SIGUSR1: Slurm's `--signal` sends that as a preemption notice (preemption.NOTICES).
STALL_SIGNAL = getattr(__import__("signal"), "SIGUSR2", None)

# Launched: how long a stalled process waits, alive, while the launcher collects every process's stacks
# (a process that ended first could take the others down with it: process 0 hosts jax.distributed).
LAUNCHER_STACKS_SECONDS = 5.0


def _stderr_fd() -> int | None:
    """The process's own stderr (a test's captured sys.stderr has no file descriptor); None without one."""
    try:
        return sys.__stderr__.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _launcher_pid() -> int | None:
    """The pid of the `acceltrain launch` that started this process, if one did and SIGUSR2 exists."""
    import signal

    from acceltrain import cluster

    return cluster.launcher_pid() if hasattr(signal, "SIGUSR2") else None


_HOST = __import__("socket").gethostname()


def python_stacks() -> str:
    """Every thread's Python stack, as faulthandler writes it (it writes to a file, not a string)."""
    with tempfile.TemporaryFile("w+") as dump:
        faulthandler.dump_traceback(dump, all_threads=True)
        dump.seek(0)
        return dump.read()


def show_stacks_on(signum: int) -> None:
    """On `signum`, write every thread's stack to stderr (what `acceltrain launch` asks of the processes
    that did not stall, so the job shows where each one stood)."""
    faulthandler.register(signum, all_threads=True, chain=False)


def check_timeout(stall_timeout, name: str = "stall_timeout") -> float:
    """The timeout in seconds (None: the default), or a UsageError in Keras's form."""
    from acceltrain.errors import UsageError

    if stall_timeout is None:
        return DEFAULT_STALL_TIMEOUT
    if isinstance(stall_timeout, bool) or not isinstance(stall_timeout, (int, float)) or stall_timeout < 0 \
            or stall_timeout != stall_timeout:
        raise UsageError(f"Received {name}={stall_timeout!r}. Expected seconds, a number of at least 0 (0 turns "
                         f"the stall watchdog off; default {DEFAULT_STALL_TIMEOUT:g}), e.g. {name}=600.")
    return float(stall_timeout)
