"""Rerun every benchmark, one after another, then rewrite BENCHMARKS.md and the measured figures of README.

    python benchmarks/run_all.py                    # every section, in sections.py's order (about 1.5 h)
    python benchmarks/run_all.py --only corpus      # some sections; the others keep their records
    python benchmarks/run_all.py --quick            # tiny settings: the whole pipeline in minutes

Run it on a quiet machine: each benchmark's own record says what the load average was before and while it ran,
and README and the manual quote no time from a record taken at a load above half the cores (render.py). A full
run waits before each benchmark (up to --wait seconds) for the load average to fall to that bound.
A full run starts only on a committed tree (its records name the commit); the records its own sections write do
not stop the sections after them, whose records name the commit and the earlier records of the run
(_results.OWN_CHANGES). Each benchmark runs in its own process, in turn; its wall time is printed as it ends, beside the time
sections.py expects, and a table of all of them at the end. A failed benchmark keeps its old record; the
others go on, and the exit code is 1.

--quick writes its records to a temporary folder (marked quick, so render.py refuses them for the committed
files), renders BENCHMARKS.md and README.md from them into that folder, and touches nothing committed.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _results, render  # noqa: E402
from benchmarks.sections import BY_NAME, SECTIONS  # noqa: E402


def command(section, quick: bool, folder: Path) -> list[str]:
    extra = ["--quick", "--results", str(folder)] if quick else []
    return [sys.executable, str(_results.HERE / section.script), *section.args, *extra]


def runnable_here(section) -> bool:
    return section.needs != "gpu" or shutil.which("nvidia-smi") is not None


def run(section, quick: bool, folder: Path, wait: float = 0, own: dict | None = None) -> tuple[bool, float]:
    """Run one benchmark in its own process, its output shown as it goes; (succeeded, wall seconds). `own`: the
    commit the run began on and the records its earlier sections wrote (_results.OWN_CHANGES)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(_results.REPO / "src"), str(_results.REPO), os.environ.get("PYTHONPATH")) if p)}
    if own is not None:
        env[_results.OWN_CHANGES] = json.dumps(own)
    if not quick and wait:
        load = _results.wait_for_quiet(wait)
        if load is not None and load > _results.quiet_bound(os.cpu_count()):
            print(f"=== {section.name}: the load average is still {load:.1f} after {wait:.0f} s of waiting: its record "
                  "will say so, and its timed figures will not be quoted", flush=True)
    print(f"\n=== {section.name}: {section.command}{' --quick' if quick else ''} "
          f"(load average {_results.load_average()}; expected about {section.minutes:g} min in full)", flush=True)
    started = time.perf_counter()
    done = subprocess.run(command(section, quick, folder), env=env, cwd=_results.REPO)
    seconds = time.perf_counter() - started
    print(f"=== {section.name}: {'done' if done.returncode == 0 else f'FAILED (exit {done.returncode})'} in "
          f"{_results.duration(seconds)}", flush=True)
    return done.returncode == 0, seconds


def render_quick(folder: Path) -> None:
    """BENCHMARKS.md and README.md as the quick records make them, written into `folder`."""
    found = render.records(folder, allow_quick=True)
    said = render.quotes(found)
    (folder / "BENCHMARKS.md").write_text(render.benchmarks_md(found))
    (folder / "README.md").write_text(render.fill_markers((_results.REPO / "README.md").read_text(), said))
    print(f"rendered {folder / 'BENCHMARKS.md'} and {folder / 'README.md'} from the quick records")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny settings, records in a temporary folder")
    parser.add_argument("--results", type=Path, help="with --quick: the folder for its records (default: a new "
                                                     "temporary one)")
    parser.add_argument("--wait", type=float, default=300, metavar="SECONDS",
                        help="a full run: wait up to this long before each benchmark for a quiet machine (default 300)")
    parser.add_argument("--only", nargs="+", choices=list(BY_NAME), metavar="SECTION",
                        help=f"only these sections: {', '.join(BY_NAME)}")
    args = parser.parse_args(argv)
    if args.results and not args.quick:
        parser.error(f"Received --results {args.results} without --quick. A full run writes the committed records "
                     f"({_results.RESULTS.relative_to(_results.REPO)}); pass --quick to write elsewhere.")
    chosen = [section for section in SECTIONS if not args.only or section.name in args.only]
    for section in [section for section in chosen if not runnable_here(section)]:
        print(f"skipping {section.name}: it needs a {section.needs} (benchmarks/gpu_check.sh on such a machine)")
        chosen.remove(section)
    folder = _results.RESULTS
    if args.quick:
        folder = args.results or Path(tempfile.mkdtemp(prefix="acceltrain-benchmarks-quick-"))
    own = None
    if not args.quick:  # only the changes there before it began are refused: its own records do not stop it
        commit = _results.versions().get("commit")
        if commit is None or commit.endswith(_results.UNCOMMITTED):
            tree = f"a tree with uncommitted changes ({commit})" if commit else "a tree with no git commit"
            print(f"run_all: error: Received a full run on {tree}. A record must name the commit it measured: commit "
                  "first (or stash), then rerun; --quick checks the pipeline on any tree. Nothing was run.",
                  file=sys.stderr)
            return 2
        own = {"commit": commit, "paths": []}
    timings = []
    for section in chosen:
        timings.append((section, *run(section, args.quick, folder, args.wait, own)))
        if own is not None and timings[-1][1]:  # its record: the next sections' tree has it changed, and says so
            own["paths"].append(str((folder / f"{section.name}.json").relative_to(_results.REPO)))
    print("\nsection                      result  wall time  expected (full run)")
    for section, succeeded, seconds in timings:
        print(f"{section.name:28} {'ok' if succeeded else 'FAILED':7} {_results.duration(seconds):>9}  "
              f"{section.minutes:g} min")
    print(f"total: {_results.duration(sum(seconds for _, _, seconds in timings))}")
    if args.quick:
        render_quick(folder)
    else:
        render.main([])
    return 0 if all(succeeded for _, succeeded, _ in timings) else 1


if __name__ == "__main__":
    sys.exit(main())
