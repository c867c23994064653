"""One-line messages to stderr: the banner, each 'auto' decision with its reason, notes and warnings.

stdout stays for results (JSON, test accuracy), so `acceltrain devices --json | jq` works.
"""

import os
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
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


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
