"""A benchmark run's record, benchmarks/results/<section>.json, and the words every section shares.

A record holds what one run measured (`raw`: every number, as measured), the command, when it ran (UTC),
on what (the CPU's model, its cores, the 1-minute load average at the start and the end, sampled while it ran,
and the CPU time the run itself used) and with what (Python and library versions, the commit). The script
that measured it also renders it: its `summarize(raw)` gives the figures the section prints, its
`render(summary, record)` the section, so BENCHMARKS.md is a function of the committed records
(`python benchmarks/render.py`).

A timed figure is quoted (README, the manual) only from a quiet record (`loaded` finds none). The rule is
acceltrain's own, src/acceltrain/commands/machine_load.py, which `acceltrain bench`'s line follows too, on the same
reading (a record's Run holds it; epoch_speed.py passes it to bench.run): the machine's load average before the run
began, and the work of others while it ran (the machine's busy CPU time, /proc/stat, less the run's own, a second of
wall: the cores' worth others kept busy), each at most half its cores: 1 on the project's 2-core machine. (The load
average while it ran counts the run's own waiting threads too, so it is kept, not judged.) render.py withholds a
loaded record's quotes, naming the rerun that brings them back (`withheld`), unless the script lists the quote in
LOAD_FREE (its figures are counts, bytes or accuracies that a busy machine does not change).

Two kinds of record are not measurements of the committed kind, and say so:
- quick (`--quick`): tiny settings, to check the pipeline end to end. Written outside benchmarks/results
  (a temporary folder unless `--results` says where), and refused by the renderer for the committed files.
- transcribed: figures copied from a BENCHMARKS.md written before the scripts kept records. It holds the
  `summary` that section printed (rounded as printed) instead of `raw`, and its `provenance` names the
  source; a rerun replaces it.
"""

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import statistics
import threading
import time
from importlib import metadata
from pathlib import Path

from acceltrain.commands import machine_load
from acceltrain.commands.machine_load import (QUIET_LOAD_PER_CORE, cpu_busy_seconds, load_average,  # noqa: F401
                                              own_cpu_seconds, quiet_bound)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
QUICK_RESULTS = Path(tempfile.gettempdir()) / "acceltrain-benchmarks-quick"
MEASURED = "measured"
UNCOMMITTED = "+changes"  # after a record's commit: the tree had changes no commit holds (render.py refuses it)
# A copied tree (the GPU machine's, benchmarks/gpu_check.sh: the device tool sends the working tree with the .git of
# the session's first commit) names its commit here: the caller passes `git rev-parse --short HEAD` of a clean tree.
TREE_COMMIT = "ACCELTRAIN_TREE_COMMIT"
# run_all.py's sections after the first run on a tree their run's earlier records changed: it passes the commit it
# began on (clean) and the records it wrote, as JSON; a record taken on that tree names the commit and those paths.
OWN_CHANGES = "ACCELTRAIN_RUN_OWN_CHANGES"
# Printed with the versions of a record, where installed (importlib.metadata: nothing is imported).
LOAD_SAMPLE_SECONDS = 5
LIBRARIES = ("keras", "jax", "jaxlib", "tensorflow", "tensorflow-cpu", "orbax-checkpoint", "keras-hub", "libtpu",
             "numpy")


# --- Writing a record -------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags every benchmark script takes: where its record goes, and the quick pipeline check."""
    parser.add_argument("--quick", action="store_true",
                        help="tiny settings, to check the pipeline in seconds; the record is marked quick and "
                             f"goes to {QUICK_RESULTS} (never to benchmarks/results)")
    parser.add_argument("--results", type=Path, help=f"the folder for the record (default {RESULTS.relative_to(REPO)}"
                                                     f"; with --quick, {QUICK_RESULTS})")


def results_folder(args: argparse.Namespace) -> Path:
    folder = args.results or (QUICK_RESULTS if args.quick else RESULTS)
    if args.quick and folder.resolve() == RESULTS.resolve():
        sys.exit(f"Received --quick --results {folder}. A quick record must not replace a committed one: "
                 "pass another --results folder, or leave it out.")
    return folder


class Run:
    """One run of a benchmark script: created as it starts, `save(section, raw)` as it ends."""

    def __init__(self, script: str, args: argparse.Namespace):
        self.script = Path(script).name
        self.quick = bool(args.quick)
        self.folder = results_folder(args)
        self.command = shlex.join(["python", f"benchmarks/{self.script}", *without_results(sys.argv[1:])])
        self.reading = machine_load.Reading.now()  # the one reading bench's line is judged by too (bench.run(reading=))
        self.started = self.reading.started
        self.machine = {**machine(), "load_before": self.reading.load_before}
        self.loads = _LoadSampler()
        commit = versions().get("commit")
        if not self.quick and (commit is None or commit.endswith(UNCOMMITTED)):
            tree = f"a tree with uncommitted changes ({commit})" if commit else "a tree with no git commit"
            sys.exit(f"Received a full run on {tree}. A record must name the commit it measured, and render.py "
                     "refuses one that does not: commit first (or stash), then rerun; --quick checks the pipeline "
                     "on any tree.")

    def save(self, section: str, raw: dict) -> Path:
        finished = time.time()
        samples = self.loads.stop()
        own = self.reading.own()
        others = self.reading.others(finished, own)  # the cores' worth others kept busy besides the run's own
        record = {
            "section": section,
            "script": self.script,
            "command": self.command,
            "provenance": MEASURED,
            "quick": self.quick,
            "started": utc(self.started),
            "finished": utc(finished),
            "wall_seconds": round(finished - self.started, 1),
            "machine": {**self.machine, "load_after": load_average(), "load_samples": samples,
                        "own_cpu_seconds": round(own, 1), "others_load": others},
            "versions": versions(),
            "raw": raw,
        }
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{section}.json"
        temporary = path.with_suffix(".json.partial")  # a killed run never leaves half a record
        temporary.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        temporary.replace(path)
        print(f"{section}: record written to {path} ({record['wall_seconds']:.0f} s)", file=sys.stderr, flush=True)
        return path


class _LoadSampler:
    """The 1-minute load average every LOAD_SAMPLE_SECONDS while a run measures, in a daemon thread."""

    def __init__(self):
        self.samples, self._done = [], threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self):
        while not self._done.wait(LOAD_SAMPLE_SECONDS):
            load = load_average()
            if load is not None:
                self.samples.append(load)

    def stop(self) -> list[float]:
        self._done.set()
        self._thread.join()
        return self.samples


def loaded(record: dict) -> str | None:
    """Why a measured record is not quiet enough to quote a time from (None: it is): machine_load.loaded, the rule
    `acceltrain bench`'s own line follows, on the record's load before it began and others' load while it ran."""
    if record.get("provenance") != MEASURED:
        return None
    machine_ = record.get("machine") or {}
    return machine_load.loaded(machine_.get("load_before"), machine_.get("others_load"), machine_.get("cores"))


def wait_for_quiet(limit_seconds: float = 300, cores: int | None = None) -> float | None:
    """Wait (at most `limit_seconds`) until the 1-minute load average is within the quiet bound; the load then."""
    bound = quiet_bound(cores or os.cpu_count())
    deadline = time.time() + limit_seconds
    while (load := load_average()) is not None and load > bound and time.time() < deadline:
        time.sleep(10)
    return load


def without_results(argv: list[str]) -> list[str]:
    """The arguments less `--results DIR`: where a record is written does not change what it measures."""
    kept, args = [], iter(argv)
    for arg in args:
        if arg == "--results":
            next(args, None)
        elif not arg.startswith("--results="):
            kept.append(arg)
    return kept


def utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def machine() -> dict:
    """What ran it: the CPU's model and logical cores, and the 1-minute load average now."""
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "load_before": load_average()}


def versions() -> dict:
    found = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    if os.environ.get(TREE_COMMIT):  # a copy of a committed tree (gpu_check.sh), its own .git absent or stale
        found["commit"] = os.environ[TREE_COMMIT]
        return found
    head, changed = tree()
    if head is None:
        return found
    own = json.loads(os.environ.get(OWN_CHANGES) or "{}")  # run_all.py: the commit it began on, the records it wrote
    if changed and own.get("commit") == head and set(changed) <= set(own.get("paths", ())):
        found["commit"] = head
        found["changed_by_this_run"] = changed  # its earlier sections' records, and nothing else
    else:
        found["commit"] = head + (UNCOMMITTED if changed else "")
    return found


def tree() -> tuple[str | None, list[str]]:
    """The commit checked out (None: no git) and the tracked paths changed since it, from the repository's root."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                                capture_output=True, text=True)
    except OSError:
        return None, []
    if head.returncode != 0:
        return None, []
    return head.stdout.strip(), sorted(line[3:].split(" -> ")[-1] for line in status.stdout.splitlines() if line.strip())


# --- Reading a record -------------------------------------------------------------------------------

def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def summary_of(record: dict, summarize) -> dict:
    """The figures a section prints: computed from the run's raw measurements, or, for a transcribed
    record, the summary its old section printed."""
    return summarize(record["raw"]) if "raw" in record else record["summary"]


# --- Words every section shares ---------------------------------------------------------------------

def provenance(record: dict, usual_machine: dict | None = None) -> str:
    """Where the section's figures come from: the run's date, machine, load and versions, or the source it
    was transcribed from; and whether it ran on another CPU than most sections of the file."""
    machine_ = record.get("machine") or {}
    on = f"{machine_.get('cores', '?')} cores of {machine_.get('cpu', 'an unrecorded CPU')}"
    if record["provenance"] == MEASURED:
        start, end = record["started"], record["finished"]
        span = f"{start[:10]} {start[11:16]} to {'' if end[:10] == start[:10] else end[:10] + ' '}{end[11:16]} UTC"
        said = (f"Measured {span} ({duration(record['wall_seconds'])}) on {on}, "
                f"{load_phrase(machine_.get('load_before'), machine_.get('load_after'), machine_.get('cores'))}; "
                f"{versions_phrase(record.get('versions') or {})}.")
    else:
        dated = f"dated {record['started']} by that section" if record.get("started") else "undated"
        said = (f"{record['provenance']}: the figures that section printed (rounded as printed), none remeasured; "
                f"{dated}; ran on {on}, {versions_phrase(record.get('versions') or {})}.")
    why = loaded(record)
    if why:
        said += (f" Not a quiet run ({why}, above the quiet bound of {quiet_bound(machine_.get('cores')):g}): its "
                 f"times are indicative only, and README and the manual quote none of them until a quiet rerun "
                 f"(`{record['command']}`).")
    if record.get("quick"):
        said = "A --quick run (tiny settings, to check the pipeline): not a measurement to quote. " + said
    if usual_machine and same_cpu(machine_) is not None and same_cpu(machine_) != same_cpu(usual_machine):
        said += (f" This ran on another CPU than most sections here ({usual_machine['cores']} cores of "
                 f"{usual_machine['cpu']}): compare its figures with theirs only as ratios.")
    return said


def withheld(record: dict) -> str:
    """What a marker says in place of a loaded record's timed quote: why, and the rerun that brings it back."""
    cores = (record.get("machine") or {}).get("cores")
    return (f"(figure withheld: BENCHMARKS.md, {record['section']}, was {loaded(record)}, above the quiet bound of "
            f"{quiet_bound(cores):g} on {cores} cores; it waits for a quiet rerun, `{record['command']}`)")


def same_cpu(machine_: dict) -> tuple | None:
    """What makes two machines the same for these figures: the CPU's model and the core count."""
    return (machine_.get("cpu"), machine_.get("cores")) if machine_.get("cpu") else None


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "duration not recorded"
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def load_phrase(before: float | None, after: float | None, cores: int | None) -> str:
    if before is None and after is None:
        return "load average not recorded"
    said = f"load average (1 min) {_or_unrecorded(before)} at the start, {_or_unrecorded(after)} at the end"
    return said + busier_than_the_cores([before, after], cores)


def load_range(loads: list, cores: int | None) -> str:
    """'a load average (1 min) of 0.6 to 4.0' from the loads a run kept as its parts started, and what it implies."""
    loads = [load for load in loads if load is not None]
    if not loads:
        return "a load average that was not recorded"
    low, high = f"{min(loads):.1f}", f"{max(loads):.1f}"
    return f"a load average (1 min) of {low if low == high else f'{low} to {high}'}" + busier_than_the_cores(loads, cores)


def busier_than_the_cores(loads: list, cores: int | None) -> str:
    """The one conclusion the load supports by itself: more runnable work than cores at some point."""
    loads = [load for load in loads if load is not None]
    if cores and loads and max(loads) > cores:
        return f", above the machine's {cores} cores: more work was runnable than the cores could run, so times are inflated"
    return ""


def versions_phrase(found: dict) -> str:
    names = [("Python", "python"), ("keras", "keras"), ("jax", "jax"), ("tensorflow", "tensorflow"),
             ("tensorflow", "tensorflow-cpu"), ("commit", "commit")]
    said, seen = [], set()
    for label, key in names:
        if key in found and label not in seen:
            said.append(f"{label} {found[key]}")
            seen.add(label)
    if found.get("changed_by_this_run"):
        said.append(f"the tree changed since only by the same run's earlier records "
                    f"({', '.join(Path(path).stem for path in found['changed_by_this_run'])})")
    return ", ".join(said) if said else "versions not recorded"


def _or_unrecorded(value) -> str:
    return "not recorded" if value is None else f"{value:.1f}"


def not_recorded(value, form: str = "{}") -> str:
    """A figure as `form` formats it, or 'not recorded' where an older (transcribed) record lacks it."""
    return "not recorded" if value is None else form.format(value)


def size(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"


def cite(record: dict) -> str:
    """How a quoted figure names its source: the section, and whether the record awaits a rerun."""
    where = f"BENCHMARKS.md, {record['section']}"
    return where if record["provenance"] == MEASURED else where + ": transcribed from an earlier run, rerun pending"


def span(values, form: str = "{:.1f}", unit: str = " %") -> str:
    """'98.1-98.4 %', or '98.4 %' when every value prints the same."""
    low, high = form.format(min(values)), form.format(max(values))
    return f"{low}{unit}" if low == high else f"{low}-{high}{unit}"


def seeds_phrase(seeds: list) -> str:
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))
