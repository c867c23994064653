"""The conformance corpus, whole: every script of tests/scripts/corpus plainly and under acceltrain.

    python benchmarks/corpus.py [--modes plain run-1 run-4 run-8 launch-2x2] [--shapes NAME ...]
                                [--results FILE] [--merge FILE ...] [--no-run] [--write]

Runs each script in each mode one after another (the matrix in tests/corpus.py: plain, `acceltrain run`
at 1, 4 and 8 simulated devices, `acceltrain launch --processes 2 --simulate-devices 2` for the fit-based
ones), checks each run as the tests do, and keeps every outcome in FILE (default .corpus-results.json,
merged with what is there, so a matrix can be filled in parts). With --write, writes BENCHMARKS.md's
section "corpus" (pass counts, time under `run` at 1 device over plain) and README's table between
<!-- corpus:begin --> and <!-- corpus:end -->, both from the outcomes in FILE only.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from _report import machine, write_section

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import corpus, support  # noqa: E402

README = REPO / "README.md"
COMMAND = "python benchmarks/corpus.py --write"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--modes", nargs="+", default=list(corpus.MODES), choices=corpus.MODES)
    parser.add_argument("--shapes", nargs="+", default=[shape.name for shape in corpus.SHAPES],
                        choices=[shape.name for shape in corpus.SHAPES])
    parser.add_argument("--results", type=Path, default=REPO / ".corpus-results.json")
    parser.add_argument("--merge", type=Path, nargs="*", default=[],
                        help="result files of other parts of the matrix (run at the same time), merged into FILE")
    parser.add_argument("--no-run", action="store_true", help="run nothing: only merge and write")
    parser.add_argument("--write", action="store_true", help="write BENCHMARKS.md's section and README's table")
    args = parser.parse_args()
    results = json.loads(args.results.read_text()) if args.results.exists() else {}
    for part in args.merge:
        for name, records in json.loads(part.read_text()).items():
            results.setdefault(name, {}).update(records)
    args.results.write_text(json.dumps(results, indent=1))
    if args.no_run:
        args.shapes = []
    with tempfile.TemporaryDirectory() as folder:
        data = support.write_small_mnist(Path(folder) / "small_mnist.npz")
        for name in args.shapes:
            shape = corpus.BY_NAME[name]
            for mode in [m for m in args.modes if m in shape.modes()]:
                outcome = corpus.run(shape, mode, data)
                record = asdict(outcome)
                record.update(stdout=outcome.stdout[-4000:], stderr=outcome.stderr[-8000:], summary=outcome.summary,
                              refused=outcome.refused, load=os.getloadavg()[0], when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
                results.setdefault(name, {})[mode] = record
                args.results.write_text(json.dumps(results, indent=1))
                found = judge(shape, mode, results)
                print(f"{name:30} {mode:11} {outcome.seconds:6.1f} s  {'pass' if not found else 'FAIL: ' + '; '.join(found)}",
                      flush=True)
    if args.write:
        write_section("corpus", benchmarks_section(results))
        write_readme_table(readme_table(results))


def outcome_of(record: dict) -> corpus.Outcome:
    fields = corpus.Outcome.__dataclass_fields__
    return corpus.Outcome(**{key: value for key, value in record.items() if key in fields})


def judge(shape, mode: str, results: dict) -> list:
    records = results.get(shape.name, {})
    plain = outcome_of(records["plain"]) if "plain" in records else None
    return corpus.problems(shape, outcome_of(records[mode]), plain)


def benchmarks_section(results: dict) -> str:
    loads = [record["load"] for records in results.values() for record in records.values() if "load" in record]
    runs = sum(len(records) for records in results.values())
    shared = (f" The machine was shared: 1-minute load average {min(loads):.1f} to {max(loads):.1f} where recorded "
              f"({len(loads)} of {runs} runs), so times are noisy." if loads else "")
    lines = ["## The conformance corpus: ordinary Keras scripts, plainly and under acceltrain", "",
             f"`{COMMAND}` on {machine()}; each script run once per mode, one after another (runs dated "
             f"{dates(results)}).{shared} A run passes when it exits 0, its printed metrics match the plain run "
             "(bit for bit at 1 device; within the tolerances in `tests/corpus.py` otherwise), its acceltrain "
             "warnings are the expected ones, and it leaves no process behind.", "",
             "| mode | passed | failed (why) |", "|---|---|---|"]
    for mode in corpus.MODES:
        shapes = [shape for shape in corpus.SHAPES if mode in shape.modes() and mode in results.get(shape.name, {})]
        failed = [(shape.name, judge(shape, mode, results)) for shape in shapes]
        failed = [(name, why) for name, why in failed if why]
        why = "; ".join(f"{name}: {problem[0][:160]}" for name, problem in failed) or "none"
        lines.append(f"| {mode} | {len(shapes) - len(failed)}/{len(shapes)} | {why} |")
    ratios = []
    for shape in corpus.SHAPES:
        records = results.get(shape.name, {})
        if "plain" in records and "run-1" in records and not judge(shape, "run-1", results):
            ratios.append((shape.name, records["run-1"]["seconds"] / records["plain"]["seconds"]))
    if ratios:
        lines += ["", "Wall time of the whole script under `acceltrain run --simulate-devices 1` over plain "
                  "`python` (start-up included; both on JAX, the same machine, minutes apart): median "
                  f"{statistics.median(r for _, r in ratios):.2f}x, from {min(r for _, r in ratios):.2f}x to "
                  f"{max(r for _, r in ratios):.2f}x over {len(ratios)} scripts.", "",
                  "| script | run-1 / plain |", "|---|---|"]
        lines += [f"| {name} | {ratio:.2f}x |" for name, ratio in ratios]
    return "\n".join(lines)


def dates(results: dict) -> str:
    when = sorted(record["when"] for records in results.values() for record in records.values())
    return f"{when[0]} to {when[-1]}" if when else "never"


def cell(shape, mode: str, results: dict) -> str:
    records = results.get(shape.name, {})
    if mode not in shape.modes():
        return "n/a"
    if mode not in records:
        return "not run"
    found = judge(shape, mode, results)
    return "pass" if not found else "**fail**: " + found[0].replace("|", "/")[:90]


def status(shape, results: dict) -> str:
    """Distributed, run unchanged but undistributed (and why), refused (and the message), or failing."""
    records = results.get(shape.name, {})
    runs = [mode for mode in shape.modes() if mode != "plain" and mode in records]
    refused = [records[mode] for mode in runs if records[mode]["refused"]]
    if refused:
        return "refused: " + corpus.last_error_line(refused[0]["stderr"]).removeprefix("acceltrain: error: ")
    failing = [mode for mode in runs if judge(shape, mode, results)]
    widest = next((records[m] for m in ("run-8", "run-4", "launch-2x2") if m in records and m not in failing), None)
    if widest is None:
        return "fails under acceltrain (see the cells)" if failing else "not run under acceltrain"
    summary = widest["summary"]
    if "called no fit" in summary:
        kind = "runs unchanged, undistributed: " + summary.split(":", 1)[1].strip()
    else:
        kind = "distributed: " + summary.removeprefix("the script's ")
    return kind + (f" (fails in {', '.join(failing)})" if failing else "")


def readme_table(results: dict) -> str:
    header = ["shape", "script", *corpus.MODES[1:], "acceltrain's verdict (its closing line)"]
    lines = [f"Generated by `{COMMAND}` from its runs ({dates(results)}); a cell is `pass` when the run "
             "exits 0, prints the plain run's metrics (bit for bit at 1 device, within `tests/corpus.py`'s "
             "tolerance otherwise) and exactly the expected acceltrain warnings, and leaves no process behind.",
             "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for shape in corpus.SHAPES:
        cells = [shape.what, f"`{shape.script}`", *(cell(shape, m, results) for m in corpus.MODES[1:]),
                 status(shape, results).replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_readme_table(table: str) -> None:
    begin, end = "<!-- corpus:begin -->", "<!-- corpus:end -->"
    text = README.read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"README.md has no {begin} ... {end} block to fill")
    head, rest = text.split(begin, 1)
    README.write_text(head + begin + "\n" + table + "\n" + end + rest.split(end, 1)[1])


if __name__ == "__main__":
    main()
