"""Whether the machine was quiet enough to time on: one reading and one rule, for `acceltrain bench`'s line and the
benchmark records (benchmarks/_results.py) alike, so the two can never judge the same run differently.

A reading is taken as the measurement begins (`Reading.now()`, before the measurement's own work: a benchmark
script that calls `bench.run` several times passes its record's reading, so bench's line judges the load the
record keeps, not one its own earlier runs raised). It keeps the 1-minute load average then, the machine's busy CPU
seconds and this process's own; `others()` is the work of others since: the machine's busy CPU time less this
process's and its ended children's, a second of wall, the cores' worth others kept busy.

The rule (`loaded`): quiet when the load average before, and others' load while it ran, are each at most half the
cores (1 on the project's 2-core machine). The load average at the end counts the run's own waiting threads too,
so it is shown, not judged.
"""

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

QUIET_LOAD_PER_CORE = 0.5


def quiet_bound(cores: int | None) -> float:
    return QUIET_LOAD_PER_CORE * (cores or 2)


def loaded(before: float | None, others: float | None, cores: int | None) -> str | None:
    """Why a measurement is not quiet enough to quote a time from (None: it is): the load before it began, or the
    others' load while it ran, above half the machine's cores."""
    bound = quiet_bound(cores)
    if before is None:
        return "its load average was not recorded"
    if before > bound:
        return f"measured at a load average (1 min) of {before:.1f} at its start"
    if others is not None and others > bound:
        return f"measured while other work kept about {others:.1f} cores busy besides the run's own"
    return None


def shown(load: float | None) -> str:
    return "not recorded" if load is None else f"{load:.1f}"


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def own_cpu_seconds() -> float:
    """CPU seconds (user and system) this process and its ended children used so far: the run's own share."""
    self_, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return self_.ru_utime + self_.ru_stime + children.ru_utime + children.ru_stime


def cpu_busy_seconds() -> float | None:
    """The CPU seconds every core of the machine has been busy since boot (/proc/stat: user, nice, system, irq,
    softirq and steal: a hypervisor's other guests count as others' work); None where it cannot be read."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value) for value in fields[1:9])
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Reading:
    """The machine as a measurement began: its wall clock, load average, busy CPU seconds and this process's own."""

    started: float
    load_before: float | None
    busy_at_start: float | None
    own_at_start: float

    @classmethod
    def now(cls) -> "Reading":
        return cls(time.time(), load_average(), cpu_busy_seconds(), own_cpu_seconds())

    def own(self) -> float:
        """The CPU seconds this process and its ended children used since the start."""
        return own_cpu_seconds() - self.own_at_start

    def others(self, finished: float | None = None, own: float | None = None) -> float | None:
        """The cores' worth of CPU others kept busy from the start to `finished` (now): the machine's busy CPU time
        less this process's and its ended children's (`own`, read now unless given), a second of wall; None where
        /proc/stat cannot be read."""
        finished = time.time() if finished is None else finished
        busy = cpu_busy_seconds()
        own = self.own() if own is None else own
        if busy is None or self.busy_at_start is None or finished <= self.started:
            return None
        return round((busy - self.busy_at_start - own) / (finished - self.started), 2)
