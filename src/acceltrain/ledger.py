"""The time ledger: where a run's wall time went, measured, each instant booked to one part.

    with runtime.timeline.window() as window:   # Runtime.fit opens one itself: history.ledger
        ...
    print(window.ledger.line())

The parts (PARTS):
- start_up: from the interpreter's start (interpreter_start: Python running acceltrain's first line; the imports,
  connecting, jax.distributed) until connect() returned (commands only: a library's Runtime.fit starts its window
  at the call);
- compilation: each function traced, lowered and compiled (a persistent-cache hit included), from JAX's own
  monitoring events (backends/jax/compiles.py::watch_compiles), with the cache's hits and misses counted. TensorFlow
  reports none: there the first step of each new train function (its tracing, compiling, and the step) is
  booked here;
- input_wait: the host fetching the next batch (the `next()` of Keras's iterator, on JAX; acceltrain preparing
  an epoch's order of the samples; Keras making an epoch's iterator, before its first step and after its last:
  under a tf.distribute strategy a multi-device iterator a dataset) while no step ran on the device;
- device_steps: from a step's dispatch (its batch in hand) until its metrics were on the host;
- host_syncs: where acceltrain makes Keras wait for each step (one step at a time on CPU devices,
  backends.step_callbacks), the time the device sat idle between steps, input aside: the host's per-step work
  the rule keeps from overlapping the steps, an upper bound on the rule's cost. Without the rule the same
  gaps are Keras's own per-step overhead, booked to rest;
- evaluation: evaluate and predict calls, and the validation inside fit;
- checkpoint: the training loop blocked saving, restoring or finishing a checkpoint;
- preemption: after a resume, the steps run again that the stopped run had done past its last checkpoint;
- rest: what no part covers (building the model, writing outputs: the model, the report; callbacks' work at an
  epoch's end; a fit's set-up before its first epoch: Keras distributing its datasets, building the model from a
  first batch and its variables, 0.4-0.9 s of a small TensorFlow fit on 2 simulated devices, issue 45; a `run`
  script's own code outside its Keras calls, such as its imports: keras.utils.set_random_seed imports TensorFlow to
  seed it too; in a job of several processes, one waiting in a collective for another still
  compiling: both seen with py-spy in a 2-process launch of examples/plain_mnist.py, issue 45). A command's ledger
  ends as its last output is written: `acceltrain train` then leaves at once (cli.py::_leave_at_once), so the
  process ends within milliseconds of it.

The method. Every part is measured as intervals of one clock (time.time(), as JAX's events are), recorded by
whoever sees them: JAX's listeners, the ledger's Keras callback (training/callbacks.py::LedgerWatch), the
training loop. Intervals may overlap (a compile runs inside the first step; under Keras's asynchronous
dispatch the host fetches batch n+1 while step n runs), so each instant of the window is booked to the
highest part in PRIORITY that covers it, and to rest where none does: parts never double count, and they sum
to the wall time by construction (the tests check the wall against a clock outside the process). So a
compile inside the first step is compilation, not step time; a batch fetched while a step ran on the device
is step time, not input wait; validation inside an epoch is evaluation.

Where the boundary is under Keras's asynchronous dispatch: Keras hands a step to JAX and goes on at once; a
step ends, for the ledger, when Keras has its metrics on the host (the moment Keras calls the batch-end
callbacks, on its callback thread or, when a callback needs each step, on the main thread). A step starts
when its batch is in hand (after the iterator's `next()` on JAX; on TensorFlow, whose input runs inside the
step's graph, when Keras calls the batch-begin callbacks: there the input is step time). So the ledger sees
the device from the host: a step's time includes its dispatch and the copy of its batch to the device.

Recording costs a few time.time() calls and list appends a step; the intervals are booked (summed and
dropped) at each epoch's start and when a window closes, so memory stays one epoch's worth.
No framework is imported here.
"""

import contextlib
import math
import os
import threading
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field

# In the order the ledger prints them (metrics.json's `ledger.parts` keys).
PARTS = ("start_up", "compilation", "input_wait", "device_steps", "host_syncs", "evaluation", "checkpoint",
         "preemption", "rest")
# Which part an instant covered by several belongs to: the first of these that covers it; none: rest.
PRIORITY = ("compilation", "checkpoint", "evaluation", "preemption", "device_steps", "input_wait", "host_syncs",
            "start_up")
_RANK = {part: rank for rank, part in enumerate(PRIORITY)}
WORDS = {"start_up": "start-up", "input_wait": "input wait", "device_steps": "device steps",
         "host_syncs": "host syncs"}

# A rule names what would shrink the largest part only when that part is at least this share of the wall.
RULE_SHARE = 0.25
# The cache was cold when compiling programs it did not hold took at least this share of the compilation part
# (the rest is tracing and lowering, which every run does, and reading the programs it held).
COLD_SHARE = 0.5

# The interpreter's own start, as near as it can be read: acceltrain/__init__.py imports this module first, so this
# is when Python ran acceltrain's first line (after its own initialization, tens of milliseconds, not counted). Not
# the process's start: a shell that runs `pip install ... && acceltrain train` as its last command exec's Python in
# its own process, whose start (Linux's /proc) is the shell's, before the install.
INTERPRETER_STARTED = time.time()
# Set by `acceltrain launch` for the processes it starts: when the job started (the launcher's own start).
ENV_STARTED = "ACCELTRAIN_STARTED"


def interpreter_start() -> float:
    """When this interpreter started running acceltrain (time.time()): a command's ledger counts its start-up from
    here (INTERPRETER_STARTED)."""
    return INTERPRETER_STARTED


def run_start(env=None) -> float:
    """When this run started: a launched process's job started with its launcher (ENV_STARTED), else the interpreter."""
    env = os.environ if env is None else env
    try:
        return float(env[ENV_STARTED])
    except (KeyError, ValueError):
        return interpreter_start()


# --- Recording ------------------------------------------------------------------------------------

class Timeline:
    """The intervals of a runtime's work, booked into the windows open while they happen.

    Nothing is kept while no window is open. `watch_compiles(timeline)`, the backend's, is called when the first
    window opens and returns the function that stops it (None where the backend reports no compiles).
    Thread-safe: Keras calls batch ends from its callback threads.
    """

    def __init__(self, watch_compiles=None, clock=time.time, enabled: bool = True):
        self.enabled = enabled  # off (ACCELTRAIN_LEDGER=0): nothing is recorded and windows give no ledger
        self._watch_compiles = watch_compiles
        self._stop_watching = None
        self.compile_events = False  # whether the backend reports its compiles (JAX); set while a window is open
        self.clock = clock
        self._lock = threading.RLock()
        self._intervals: list[tuple[int, float, float]] = []  # (rank, start, end), not booked yet
        self._open: dict[object, tuple[int, float]] = {}  # token -> (rank, start)
        self._windows: list[Window] = []
        self._booked_until = 0.0
        self._counts: Counter = Counter()
        self.notes: dict = {}  # facts known once (note())
        self._seen = weakref.WeakSet()

    @classmethod
    def from_environment(cls, watch_compiles=None, env=None) -> "Timeline":
        """A timeline, off where ACCELTRAIN_LEDGER=0 (to measure what the ledger itself costs)."""
        env = os.environ if env is None else env
        return cls(watch_compiles, enabled=env.get("ACCELTRAIN_LEDGER", "1") != "0")

    def add(self, part: str, start: float, end: float) -> None:
        """One measured interval of `part`."""
        if self._windows and end > start:
            with self._lock:
                self._intervals.append((_RANK[part], start, end))

    def begin(self, part: str):
        """An interval of `part` starting now; `end(token)` ends it. Until then it counts as lasting."""
        if not self._windows:
            return None
        token = object()
        with self._lock:
            self._open[token] = (_RANK[part], self.clock())
        return token

    def end(self, token) -> None:
        with self._lock:
            opened = self._open.pop(token, None)
            if opened is not None:
                self._intervals.append((opened[0], opened[1], self.clock()))

    @contextlib.contextmanager
    def timed(self, part: str):
        token = self.begin(part)
        try:
            yield
        finally:
            self.end(token)

    def count(self, name: str, n: int = 1) -> None:
        """A fact counted while windows are open (compiles, cache hits, steps, checkpoints)."""
        if self._windows:
            with self._lock:
                self._counts[name] += n

    def note(self, name: str, value) -> None:
        """A fact known once (FLOPs of a step, the devices' peak), kept by the windows open now."""
        if self._windows:
            self.notes[name] = value

    def first_seen(self, thing) -> bool:
        """True the first time `thing` is asked about (held weakly): e.g. a train function's first step."""
        if thing in self._seen:
            return False
        self._seen.add(thing)
        return True

    # --- Windows ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def window(self, started: float | None = None, start_up_until: float | None = None):
        """Inside, the timeline books into a new window, from `started` (default: now) to its exit; the window's
        `ledger` is set on exit. `start_up_until`: the start-up ended then (connect() returned)."""
        window = self._open_window(started)
        if start_up_until is not None:
            self.add("start_up", window.start, start_up_until)
        try:
            yield window
        finally:
            self._close_window(window)

    def _open_window(self, started):
        now = self.clock()
        if not self.enabled:
            return Window(now, Counter())
        with self._lock:
            if not self._windows:
                self._intervals.clear()
                self._open.clear()
                self._counts.clear()
                self.notes.clear()
                self._booked_until = started if started is not None else now
            first = not self._windows
            start = max(started if started is not None else now, self._booked_until)
            window = Window(start, Counter(self._counts))
            self._windows.append(window)
            if first:  # watched once a window is open, so what the watcher notes is kept
                self._stop_watching = self._watch_compiles(self) if self._watch_compiles else None
                self.compile_events = self._stop_watching is not None
        return window

    def so_far(self, window) -> "Ledger | None":
        """`window`'s ledger up to now, the window left open (train's report, drawn before the run's last write)."""
        if not self.enabled:
            return None
        now = self.clock()
        self.book(now)
        with self._lock:
            facts = {name: n - window._counts_before.get(name, 0) for name, n in self._counts.items()}
            facts.update(self.notes)
            return Ledger(now - window.start, dict(window.parts), window.start, now, facts)

    def _close_window(self, window) -> None:
        if not self.enabled:
            return
        end = self.clock()
        self.book(end)
        with self._lock:
            self._windows.remove(window)
            window.close(end, self._counts, self.notes)
            if not self._windows and self._stop_watching is not None:
                self._stop_watching()
                self._stop_watching = None

    def book(self, upto: float | None = None) -> None:
        """Book what happened before `upto` (default: now) into the open windows and forget it. Called at safe
        points (an epoch's start, a window's end), where no step, compile or save is in flight."""
        upto = self.clock() if upto is None else upto
        with self._lock:
            begin = self._booked_until
            if not self._windows or upto <= begin:
                return
            pieces = [(rank, max(start, begin), min(end, upto)) for rank, start, end in self._intervals
                      if end > begin and start < upto]
            pieces += [(rank, max(start, begin), upto) for rank, start in self._open.values() if start < upto]
            self._intervals = [interval for interval in self._intervals if interval[2] > upto]
            self._booked_until = upto
            for part, start, end in attribute(pieces, begin, upto):
                for window in self._windows:
                    window.add(part, max(start, window.start), end)


def attribute(pieces, begin: float, end: float) -> list[tuple[str, float, float]]:
    """[(part, start, end)]: [begin, end] cut where any piece (rank, start, end) starts or ends, each cut given to
    the highest-ranked piece covering it (PRIORITY), or to rest."""
    events = sorted([(start, 1, rank) for rank, start, stop in pieces if stop > start]
                    + [(stop, -1, rank) for rank, start, stop in pieces if stop > start])
    active = [0] * len(PRIORITY)
    booked, at = [], begin
    for moment, change, rank in events:
        if moment > at:
            covering = next((r for r, n in enumerate(active) if n), None)
            booked.append((PRIORITY[covering] if covering is not None else "rest", at, moment))
            at = moment
        active[rank] += change
    if end > at:
        booked.append(("rest", at, end))
    return booked


@dataclass(eq=False)
class Window:
    """One span of a timeline with its own sums: a command's whole run, or one Runtime.fit."""

    start: float
    _counts_before: Counter
    parts: dict = field(default_factory=lambda: dict.fromkeys(PARTS, 0.0))
    ledger: "Ledger | None" = None

    def add(self, part: str, start: float, end: float) -> None:
        if end > start:
            self.parts[part] += end - start

    def close(self, end: float, counts: Counter, notes: dict) -> None:
        facts = {name: n - self._counts_before.get(name, 0) for name, n in counts.items()}
        facts.update(notes)
        self.ledger = Ledger(end - self.start, dict(self.parts), self.start, end, facts)


# --- The result -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ledger:
    """A window's wall time, its parts (seconds, summing to it), and the facts counted in it."""

    wall_seconds: float
    parts: dict
    started: float  # time.time() at its start and end
    ended: float
    facts: dict = field(default_factory=dict)

    @property
    def flops_per_step(self) -> float | None:
        return self.facts.get("flops_per_step")

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilization of the device steps: the steps' FLOPs (their matmuls and convolutions, as traced)
        over their time, as a share of the devices' published peak. None where either is unknown."""
        flops, peak, steps = self.facts.get("flops_per_step"), self.facts.get("peak_flops_per_second"), \
            self.facts.get("steps", 0) - self.facts.get("steps_redone", 0)
        seconds = self.parts.get("device_steps", 0.0)
        if not flops or not peak or steps <= 0 or seconds <= 0:
            return None
        return flops * steps / seconds / peak

    def as_json(self) -> dict:
        """metrics.json's `ledger`: `wall_seconds` and `parts` (the two keys scripts read), then when it started and
        ended (time.time()), the facts counted (compiles: programs compiled or loaded from the cache; cache_requests,
        cache_hits, cache_misses: the persistent cache's; steps, steps_redone, checkpoints; samples and evaluation_samples: the rows of the batches trained and evaluated) and noted
        (flops_per_step, peak_flops_per_second; compile_seconds_missed: backend compiles of programs the persistent
        cache did not hold), and the MFU."""
        facts = dict(self.facts)
        if "cache_requests" in facts:
            facts["cache_misses"] = facts["cache_requests"] - facts.get("cache_hits", 0)
        return {"wall_seconds": self.wall_seconds, "parts": dict(self.parts), "started": self.started,
                "ended": self.ended, **facts, "mfu": self.mfu}

    @classmethod
    def from_json(cls, saved: dict) -> "Ledger":
        """The ledger as `as_json` wrote it (metrics.json): `acceltrain report` redraws from it."""
        facts = {k: v for k, v in saved.items()
                 if k not in ("wall_seconds", "parts", "started", "ended", "mfu", "cache_misses")}
        parts = {**dict.fromkeys(PARTS, 0.0), **saved["parts"]}
        return cls(saved["wall_seconds"], parts, saved.get("started", 0.0), saved.get("ended", 0.0), facts)

    def largest(self) -> tuple[str, float]:
        return max(self.parts.items(), key=lambda item: item[1])

    def line(self) -> str:
        """One line: every part that took time, the largest first, and what would shrink the largest where a
        measured rule says (`shrink`)."""
        wall = self.wall_seconds or math.inf
        shown = [(part, seconds) for part, seconds in sorted(self.parts.items(), key=lambda item: -item[1])
                 if seconds >= 0.005 * wall or part == self.largest()[0]]
        said = ", ".join(f"{words(part)} {seconds:.1f} s ({percent(seconds / wall)}{self._counted(part)})"
                         for part, seconds in shown)
        advice = shrink(self.parts, self.facts, self.mfu)
        return f"where the {self.wall_seconds:.1f} s went: {said}" + (f"; {advice}" if advice else "")

    def _counted(self, part: str) -> str:
        """What a part counts where it is not what its name alone suggests: compilation is every program of the run
        (the autopilot's, evaluate's, ...), not the first step's compile that the first-step status line times; the
        device steps and evaluation their time a sample, where both were counted (`per_sample`)."""
        compiles = self.facts.get("compiles")
        if part == "compilation" and compiles:
            return f", every compile of the run: {compiles} programs"
        trained, evaluated = self.per_sample()
        if trained and evaluated and part == "device_steps":
            return f", {trained * 1e6:,.1f} µs a sample"
        if trained and evaluated and part == "evaluation":
            return f", {evaluated * 1e6:,.1f} µs a sample: {evaluated / trained:.2f}× a training step's"
        return ""

    def per_sample(self) -> tuple[float | None, float | None]:
        """(seconds a trained sample in the device steps, seconds an evaluated sample: fit's validation, evaluate and
        predict), each where its samples were counted (JAX: each batch's rows as the step pulled it)."""
        trained, evaluated = self.facts.get("samples", 0), self.facts.get("evaluation_samples", 0)
        steps, evaluation = self.parts.get("device_steps", 0.0), self.parts.get("evaluation", 0.0)
        return (steps / trained if trained > 0 and steps > 0 else None,
                evaluation / evaluated if evaluated > 0 and evaluation > 0 else None)


def words(part: str) -> str:
    return WORDS.get(part, part)


def percent(fraction: float) -> str:
    return f"{100 * fraction:.0f} %" if fraction >= 0.01 or fraction == 0 else f"{100 * fraction:.1f} %"


# What turned JAX's persistent compilation cache off (the fact "cache_off_by", noted by the backend where a setting
# did), and how to undo it: the advice names only a setting that was made.
UNDO_CACHE_OFF = {"ACCELTRAIN_COMPILATION_CACHE=0": "unset ACCELTRAIN_COMPILATION_CACHE",
                  "jax_enable_compilation_cache=False": "set jax_enable_compilation_cache back to True"}


def shrink(parts: dict, facts: dict, mfu: float | None = None) -> str | None:
    """What would shrink the largest part, where a rule over the measured parts and facts says; None where none
    does. A rule fires only when its part is the largest and at least RULE_SHARE of the wall."""
    wall = sum(parts.values())
    part, seconds = max(parts.items(), key=lambda item: item[1])
    if part == "device_steps" and mfu is not None:
        return f"the device steps ran at {percent(mfu)} of the devices' published peak FLOP/s (MFU)"
    if not wall or seconds < RULE_SHARE * wall:
        return None
    share = f"{words(part)} {percent(seconds / wall)} of this run"
    requests, missed = facts.get("cache_requests", 0), facts.get("compile_seconds_missed", 0.0)
    if part == "compilation" and requests and missed >= COLD_SHARE * seconds:
        return f"{share}: the compilation cache was cold ({requests - facts.get('cache_hits', 0)} of {requests} " \
               f"programs not in it, {missed:.1f} s compiling them); a second run reuses them"
    if part == "compilation" and facts.get("compiles") and not requests and facts.get("cache_off_by") in UNDO_CACHE_OFF:
        setting = facts["cache_off_by"]
        return f"{share}: JAX's persistent compilation cache is off ({setting}), so every run compiles anew; " \
               f"{UNDO_CACHE_OFF[setting]} to reuse the programs"
    if part == "input_wait":
        return f"{share}: the input pipeline kept the device waiting; use tf.data with prefetch, or a " \
               "keras.utils.PyDataset with workers (workers=4, use_multiprocessing=True)"
    if part == "checkpoint" and facts.get("checkpoints"):
        count = facts["checkpoints"]
        return f"{share} ({count} checkpoints, {seconds / count:.2f} s each): checkpoint less often " \
               "(--checkpoint-every, checkpoint_every=)"
    if part == "host_syncs":
        return f"{share}: Keras waited for each step on the host (one step at a time on CPU devices); fewer, " \
               "larger batches wait fewer times"
    if part == "preemption" and facts.get("steps_redone"):
        return f"{share}: {facts['steps_redone']} steps ran again after the resume; checkpoint more often " \
               "(--checkpoint-every N steps) to lose fewer"
    return None
