"""The stall watchdog: ends a process in which training has stopped moving, and shows where it stood.

A multi-device or multi-process job that loses one participant does not fail: the others wait in their
next collective, for ever, with nothing printed (a process that never reached fit, a process with more
batches than the others, a dead host whose heartbeat has not run out). While a fit, evaluate or predict
is under way, each finished step and each change of phase is a beat; when none comes for
`timeout` seconds, the watchdog prints this process's Python stacks (every line prefixed by its process
index), says which phase stalled and what usually causes it, and ends the process with EXIT_STALLED.
`acceltrain launch` then asks the other processes for their stacks and ends the job.

Neutral: no framework. Armed only inside fit/evaluate/predict, so a script's own slow work (loading data
before fit, writing files after) never trips it.
"""

import faulthandler
import os
import sys
import tempfile
import threading
import time

# Generous on purpose: the first step of a fit includes XLA's compile of the whole training step, and on a
# TPU for a large model that alone can take many minutes; a later step never takes that long. A hung job
# then costs this long, not the rest of the night. 0 turns the watchdog off.
DEFAULT_STALL_TIMEOUT = 1800.0
EXIT_STALLED = 3  # distinct from 1 (failed) and 2 (bad usage): `acceltrain launch` asks the others for stacks

CAUSES = ("a process that never reached this collective (it failed, or took another path through the "
          "script), uneven data (one process has more batches than the others, so it waits alone), or a dead "
          "or unreachable host")


class Watchdog:
    """Call arm(phase) when a phase starts, beat() after each step, disarm() when the phase ends.

    `clock`, `exit` and `stream` are seams for tests.
    """

    def __init__(self, timeout: float, process_index: int = 0, *, clock=time.monotonic, exit=os._exit,
                 stream=None, poll_seconds: float | None = None):
        self.timeout = float(timeout)
        self.process_index = process_index
        self._clock, self._exit, self._stream = clock, exit, stream
        self._poll = poll_seconds if poll_seconds is not None else min(max(self.timeout / 20, 0.05), 1.0)
        self._lock = threading.Lock()
        self._phase: str | None = None  # None: disarmed
        self._last = clock()
        self._steps = 0
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.timeout > 0

    def arm(self, phase: str) -> None:
        if not self.enabled:
            return
        with self._lock:
            self._phase, self._last = phase, self._clock()
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="acceltrain-stall-watchdog", daemon=True)
            self._thread.start()

    def beat(self, phase: str | None = None) -> None:
        with self._lock:
            if self._phase is None:
                return
            self._last = self._clock()
            self._steps += 1
            if phase is not None:
                self._phase = phase

    def disarm(self) -> None:
        with self._lock:
            self._phase = None

    def stalled_for(self) -> float | None:
        """Seconds since the last beat while armed; None when disarmed."""
        with self._lock:
            return None if self._phase is None else self._clock() - self._last

    def check(self) -> bool:
        """Fire if stalled: True if it did (the exit seam returned instead of ending the process)."""
        waited = self.stalled_for()
        if waited is None or waited < self.timeout:
            return False
        self._fire(waited)
        return True

    def _watch(self) -> None:
        while not self.check():
            time.sleep(self._poll)

    def _fire(self, waited: float) -> None:
        stream = self._stream or sys.stderr
        prefix = f"process {self.process_index}: "
        with self._lock:
            phase, steps = self._phase, self._steps
        progress = f"after {steps} step(s)" if steps else "before its first step"
        lines = [f"acceltrain: error: stalled: nothing moved for {int(waited)} s in {phase}, {progress} "
                 f"(--stall-timeout {self.timeout:g}).",
                 f"acceltrain: where it stood, thread by thread ({prefix.strip()} below):"]
        launcher = _launcher_pid()
        if launcher is None:
            lines += [prefix + line for line in python_stacks().splitlines()]
        else:  # the launcher asks every process for its stacks, this one too, before any of them ends
            lines[-1] = "acceltrain: the launcher now asks every process for its stacks (lines [i] below)."
        lines += [f"acceltrain: usual causes: {CAUSES}. Ending this process (exit {EXIT_STALLED}). A longer "
                  "first compile needs a larger --stall-timeout (0 turns the watchdog off)."]
        print("\n".join(lines), file=stream, flush=True)
        sys.stdout.flush()
        if launcher is not None:
            import signal

            os.kill(launcher, signal.SIGUSR1)
            time.sleep(LAUNCHER_STACKS_SECONDS)
        self._exit(EXIT_STALLED)


# Launched: how long a stalled process waits, alive, while the launcher collects every process's stacks
# (a process that ended first could take the others down with it: process 0 hosts jax.distributed).
LAUNCHER_STACKS_SECONDS = 5.0


def _launcher_pid() -> int | None:
    """The pid of the `acceltrain launch` that started this process, if one did and SIGUSR1 exists."""
    import signal

    from acceltrain import cluster

    return cluster.launcher_pid() if hasattr(signal, "SIGUSR1") else None


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
