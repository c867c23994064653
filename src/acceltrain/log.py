"""One-line messages to stderr: the banner, each 'auto' decision with its reason, notes and warnings.

stdout stays for results (JSON, test accuracy), so `acceltrain devices --json | jq` works.
"""

import atexit
import os
import re
import signal
import sys
import threading
import time

_quiet = False
_verbose = False
_live_line = False  # a Phase is counting seconds on the terminal's last line


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


def set_verbose(verbose: bool) -> None:
    global _verbose
    _verbose = verbose


def is_quiet() -> bool:
    return _quiet


def is_verbose() -> bool:
    return _verbose


def info(message: str) -> None:
    if not _quiet:
        _clear_live_line()
        print(f"acceltrain: {message}", file=sys.stderr, flush=True)


def debug(message: str) -> None:
    """Details for --verbose: what was read and written where, and how long each part took."""
    if _verbose and not _quiet:
        _clear_live_line()
        print(f"acceltrain: {paint(message, 'dim')}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    _clear_live_line()
    print(f"acceltrain: {paint('warning:', 'yellow')} {message}", file=sys.stderr, flush=True)


def _clear_live_line() -> None:
    """Start a message on a clean line; a live Phase redraws its own line on its next tick."""
    if _live_line:
        sys.stderr.write("\r\033[K")


# --- Colour, only where a person reads it --------------------------------------------------------

_COLOURS = {"green": "32", "yellow": "33", "red": "31", "bold": "1", "dim": "2"}


def use_colour(stream=None) -> bool:
    """Colour on a terminal only: never in files, pipes or CI logs, and never with NO_COLOR set."""
    stream = stream or sys.stderr
    return "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb" and _isatty(stream)


def paint(text: str, colour: str, stream=None) -> str:
    return f"\033[{_COLOURS[colour]}m{text}\033[0m" if use_colour(stream) else text


def _isatty(stream) -> bool:
    if stream is sys.stderr and _stderr_terminal is not None:
        return _stderr_terminal  # stderr runs through the noise filter's pipe; what it ends on is a terminal
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# --- Start-up noise: what TensorFlow, XLA and libtpu print as they load, dropped at default verbosity ----------
# TensorFlow 2.21 and libtpu log from C++ through absl before anything can configure it (TF_CPP_MIN_LOG_LEVEL does
# not silence these lines: tried here), so the lines are dropped from the process's stderr itself (fd 2) by
# filter_start_up_noise. Every pattern is a line seen on a JAX-backend command; -v shows them all.
START_UP_NOISE = tuple(re.compile(pattern) for pattern in (
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$",
    r"^WARNING: Logging before InitGoogle\(\) is written to STDERR$",
    r"^[IW]\d{4} [\d:.]+ +\d+ [\w.-]+:\d+\] ",  # absl's INFO and WARNING lines (oneDNN, cuda drivers)
    r"^E\d{4} [\d:.]+ +\d+ [\w.-]+:\d+\] .*(cuInit|TPU_WORKER_HOSTNAMES|TPU_ACCELERATOR_TYPE)",
    r"^Failed to find host bounds for accelerator type: WARNING: could not determine TPU accelerator type",
    r"^=== Source Location Trace: ===$",  # libtpu's exception texts: this line, then its C++ frames
    r"^[\w/.-]+\.cc:\d+$",
    # Gloo's, once per collective group a process of a job joins, on stdout: the launcher drops it there; where a
    # bar's line was not ended yet, it follows the bar's text, so it is looked for anywhere in the line.
    r"\[Gloo\] Rank \d+ is connected to \d+ peer ranks\. Expected number of connected peer ranks is : \d+$",
))
_stderr_terminal = None  # whether the stderr the filter writes to is a terminal (while the filter runs)


def is_start_up_noise(line: str) -> bool:
    return any(pattern.search(line.rstrip("\r\n")) for pattern in START_UP_NOISE)


def filter_start_up_noise() -> None:
    """From here on, this process's stderr (fd 2: Python's lines and C++ code's alike) passes through a small forked
    process that drops the START_UP_NOISE lines and passes every other byte on, in order. A forked process, not a
    thread: it outlives a crash of this one and still passes on its last words (it ends at end of file, once every
    writer is gone), and signals to the job (SIGINT, SIGTERM) leave it to finish. At exit this process's stderr is
    given back and the filter waited for. Call it before any framework starts a thread (the CLI's first step)."""
    global _stderr_terminal
    if _verbose or os.name != "posix" or not hasattr(os, "fork"):
        return
    sys.stderr.flush()
    terminal = _isatty(sys.stderr)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the filter
        os.close(write)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
            signal.signal(signum, signal.SIG_IGN)
        try:
            _pass_on(read, 2)
        finally:
            os._exit(0)
    os.close(read)
    original = os.dup(2)
    os.dup2(write, 2)
    os.close(write)
    _stderr_terminal = terminal

    def give_back():
        global _stderr_terminal
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(original, 2)  # the pipe's last writer here gone: the filter reads to its end, and exits
        _stderr_terminal = None
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
            time.sleep(0.01)

    atexit.register(give_back)


def _pass_on(read: int, out: int) -> None:
    """Whole lines, each unless it is noise; a line still being written that redraws itself ('\r': a live phase)
    at once."""
    pending = b""
    while chunk := os.read(read, 65536):
        *lines, pending = (pending + chunk).split(b"\n")
        kept = [line + b"\n" for line in lines if not is_start_up_noise(line.decode(errors="replace"))]
        if b"\r" in pending:
            kept.append(pending)
            pending = b""
        if kept:
            os.write(out, b"".join(kept))
    if pending and not is_start_up_noise(pending.decode(errors="replace")):
        os.write(out, pending)


# --- Slow phases: say what is happening and for how long -----------------------------------------

class Phase:
    """A step that can take a while (connecting to a TPU, the first compile), shown while it runs.

    On a terminal one line counts the seconds in place; in a log, a line when it starts, one every
    HEARTBEAT seconds while it lasts, and one with its time when it ends. So a long compile never looks
    like a hang.
    """

    TICK = 1.0  # seconds between updates on a terminal
    HEARTBEAT = 30.0  # seconds between "still ..." lines in a log

    def __init__(self, what: str):
        self.what = what
        self.seconds = None
        self._started = None
        self._stop = threading.Event()
        self._thread = None
        self._live = False

    def start(self) -> "Phase":
        self._started = time.perf_counter()
        if _quiet:
            return self
        self._live = _isatty(sys.stderr)
        if self._live:
            _set_live_line(True)
            self._write(f"\racceltrain: {self.what}…")
        else:
            info(f"{self.what}…")
        self._thread = threading.Thread(target=self._tick, daemon=True, name=f"acceltrain: {self.what}")
        self._thread.start()
        return self

    def stop(self, outcome: str = "done") -> float:
        if self.seconds is not None:
            return self.seconds
        self.seconds = time.perf_counter() - self._started
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            ending = f"{self.what}: {outcome} in {self.seconds:.1f} s"
            if self._live:
                _set_live_line(False)
                self._write(f"\r\033[Kacceltrain: {ending}\n")
            else:
                info(ending)
        return self.seconds

    def _tick(self) -> None:
        interval = self.TICK if self._live else self.HEARTBEAT
        while not self._stop.wait(interval):
            elapsed = time.perf_counter() - self._started
            if self._live:
                self._write(f"\r\033[Kacceltrain: {self.what}… {elapsed:.0f} s")
            else:
                info(f"still {self.what}… {elapsed:.0f} s")

    @staticmethod
    def _write(text: str) -> None:
        sys.stderr.write(text)
        sys.stderr.flush()

    def __enter__(self) -> "Phase":
        return self.start()

    def __exit__(self, error_type, error, traceback) -> None:
        self.stop("failed" if error_type else "done")


def _set_live_line(live: bool) -> None:
    global _live_line
    _live_line = live


def phase(what: str) -> Phase:
    """`with log.phase("connecting to the hardware"):` shows the phase and its seconds while it runs."""
    return Phase(what)
