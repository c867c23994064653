"""The conformance corpus, whole: every script of tests/scripts/corpus plainly and under acceltrain.

    python benchmarks/corpus.py [--modes plain run-1 run-4 run-8 launch-2x2] [--shapes NAME ...]
                                [--work FILE] [--merge FILE ...] [--no-run] [--quick]

Runs each script in each mode one after another (the matrix in tests/corpus.py: plain, `acceltrain run`
at 1, 4 and 8 simulated devices, `acceltrain launch --processes 2 --simulate-devices 2` for the fit-based
ones) and judges each run as the tests do. Every outcome, output included, goes to a work file (default
.corpus-results.json, started afresh; `--work FILE` continues FILE, `--merge` adds parts of the matrix run
elsewhere at the same time, `--no-run` only merges). At the end the judged outcomes, without their output,
are recorded as the section "corpus" (results/corpus.json); render.py makes BENCHMARKS.md's section and
README's table from it. --quick: two scripts, plain and run-1.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `tests` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _noise, _results  # noqa: E402

SECTION = "corpus"
REPO = _results.REPO
QUICK_SHAPES, QUICK_MODES = ["functional_two_in_two_out", "custom_loop"], ["plain", "run-1"]
WIDEST_FIRST = ("run-8", "run-4", "launch-2x2", "run-1")  # the mode whose closing line the README's verdict quotes


def main():
    from tests import corpus, support

    parser = argparse.ArgumentParser()
    parser.add_argument("--modes", nargs="+", default=list(corpus.MODES), choices=corpus.MODES)
    parser.add_argument("--shapes", nargs="+", default=[shape.name for shape in corpus.SHAPES],
                        choices=[shape.name for shape in corpus.SHAPES])
    parser.add_argument("--work", type=Path, help="continue this work file (default: a fresh .corpus-results.json)")
    parser.add_argument("--merge", type=Path, nargs="*", default=[],
                        help="work files of other parts of the matrix (run at the same time), merged in")
    parser.add_argument("--no-run", action="store_true", help="run nothing: only merge and record")
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    if args.quick:
        args.shapes, args.modes = QUICK_SHAPES, QUICK_MODES
    work = args.work or (_results.results_folder(args) / "corpus-work.json" if args.quick else
                         REPO / ".corpus-results.json")
    results = json.loads(work.read_text()) if args.work and work.exists() else {}
    for part in args.merge:
        for name, records in json.loads(part.read_text()).items():
            results.setdefault(name, {}).update(records)
    work.parent.mkdir(parents=True, exist_ok=True)
    work.write_text(json.dumps(results, indent=1))
    with tempfile.TemporaryDirectory() as folder:
        data = support.write_small_mnist(Path(folder) / "small_mnist.npz")
        for name in [] if args.no_run else args.shapes:
            shape = corpus.BY_NAME[name]
            for mode in [m for m in args.modes if m in shape.modes()]:
                outcome = corpus.run(shape, mode, data)
                record = asdict(outcome)
                record.update(stdout=outcome.stdout[-4000:], stderr=outcome.stderr[-8000:], summary=outcome.summary,
                              refused=outcome.refused, load=_results.load_average(),
                              when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
                results.setdefault(name, {})[mode] = record
                work.write_text(json.dumps(results, indent=1))
                found = judge(shape, mode, results)
                print(f"{name:30} {mode:11} {outcome.seconds:6.1f} s  {'pass' if not found else 'FAIL: ' + '; '.join(found)}",
                      file=sys.stderr, flush=True)
    run.save(SECTION, recorded(results))


def outcome_of(record: dict):
    from tests import corpus

    fields = corpus.Outcome.__dataclass_fields__
    return corpus.Outcome(**{key: value for key, value in record.items() if key in fields})


def judge(shape, mode: str, results: dict) -> list:
    from tests import corpus

    records = results.get(shape.name, {})
    plain = outcome_of(records["plain"]) if "plain" in records else None
    return corpus.problems(shape, outcome_of(records[mode]), plain)


def recorded(results: dict) -> dict:
    """The work file's outcomes judged, and kept without their output: what the section is made from."""
    from tests import corpus

    shapes = {}
    for shape in corpus.SHAPES:
        records = results.get(shape.name, {})
        runs = {}
        for mode, record in records.items():
            runs[mode] = {"returncode": record["returncode"], "seconds": round(record["seconds"], 1),
                          "load": record.get("load"), "when": record["when"], "summary": record["summary"],
                          "refused": record["refused"], "metrics": record["metrics"], "warnings": record["warnings"],
                          "error_line": corpus.last_error_line(record["stderr"]) if record["returncode"] else "",
                          "problems": judge(shape, mode, results)}
        shapes[shape.name] = {"script": shape.script, "what": shape.what, "modes": list(shape.modes()), "runs": runs}
    return {"modes": list(corpus.MODES), "shapes": shapes}


# --- Rendering ----------------------------------------------------------------------------------

def cell(shape: dict, mode: str) -> str:
    if mode not in shape["modes"]:
        return "n/a"
    if mode not in shape["runs"]:
        return "not run"
    problems = shape["runs"][mode]["problems"]
    return "pass" if not problems else "**fail**: " + problems[0].replace("|", "/")[:90]


def status(shape: dict) -> str:
    """Distributed, run unchanged but undistributed (and why), refused (and the message), or failing."""
    runs = {mode: run for mode, run in shape["runs"].items() if mode != "plain"}
    refused = [run for run in runs.values() if run["refused"]]
    if refused:
        return "refused: " + refused[0]["error_line"].removeprefix("acceltrain: error: ")
    failing = [mode for mode, run in runs.items() if run["problems"]]
    widest = next((runs[m] for m in WIDEST_FIRST if m in runs and m not in failing), None)
    if widest is None:
        return "fails under acceltrain (see the cells)" if failing else "not run under acceltrain"
    summary = widest["summary"]
    if "called no fit" in summary:
        kind = "runs unchanged, undistributed: " + summary.split(":", 1)[1].strip()
    elif "ran on one device, undistributed" in summary:  # every call: no batch of them divides over the replicas
        kind = "runs unchanged, on one device: " + summary.removeprefix("the script's ")
    else:
        kind = "distributed: " + summary.removeprefix("the script's ")
    return kind + (f" (fails in {', '.join(failing)})" if failing else "")


def summarize(raw: dict) -> dict:
    shapes = raw["shapes"].values()
    modes = {}
    for mode in raw["modes"]:
        judged = [(shape["script"], shape["runs"][mode]["problems"]) for shape in shapes if mode in shape["runs"]]
        modes[mode] = {"passed": sum(not problems for _, problems in judged), "total": len(judged),
                       "failed": [[script.removesuffix(".py"), problems[0][:160]] for script, problems in judged
                                  if problems]}
    ratios = [[shape["script"].removesuffix(".py"), shape["runs"]["run-1"]["seconds"] / shape["runs"]["plain"]["seconds"]]
              for shape in shapes if "plain" in shape["runs"] and "run-1" in shape["runs"]
              and not shape["runs"]["run-1"]["problems"]]
    runs = [run for shape in shapes for run in shape["runs"].values()]
    when = sorted(run["when"] for run in runs)
    return {"modes": modes, "ratios": ratios, "dates": [when[0], when[-1]] if when else None,
            "loads": _load_summary([run["load"] for run in runs], len(runs)),
            "rows": [{"what": shape["what"], "script": shape["script"],
                      "cells": {mode: cell(shape, mode) for mode in raw["modes"][1:]}, "status": status(shape)}
                     for shape in shapes]}


def _load_summary(loads: list, runs: int) -> dict:
    loads = [load for load in loads if load is not None]
    return {"min": min(loads, default=None), "max": max(loads, default=None), "recorded": len(loads), "runs": runs}


def dates(summary: dict) -> str:
    return f"{summary['dates'][0]} to {summary['dates'][1]}" if summary["dates"] else "never"


def render(summary: dict, record: dict) -> str:
    loads = summary["loads"]
    lines = ["## The conformance corpus: ordinary Keras scripts, plainly and under acceltrain", "",
             f"`{record['command']}`; each script run once per mode, one after another (runs dated {dates(summary)}). "
             f"The load average was recorded as {loads['recorded']} of its {loads['runs']} runs started: "
             f"{_results.load_range([loads['min'], loads['max']], record['machine'].get('cores'))}. A run passes when it exits 0, its printed metrics "
             "match the plain run (bit for bit at 1 device, but for a metric TensorFlow's own plain runs round a few ulps "
             "apart, named there; within the tolerances in `tests/corpus.py` otherwise), "
             "its acceltrain warnings are the expected ones, and it leaves no process behind.", "",
             "| mode | passed | failed (why) |", "|---|---|---|"]
    for mode, found in [(mode, found) for mode, found in summary["modes"].items() if found["total"]]:
        why = "; ".join(f"{name}: {problem}" for name, problem in found["failed"]) or "none"
        lines.append(f"| {mode} | {found['passed']}/{found['total']} | {why} |")
    ratios = summary["ratios"]
    if ratios:
        values = [ratio for _, ratio in ratios]
        noise = _noise.judge(statistics.median(values), [None]).noise_words()
        lines += ["", "Wall time of the whole script under `acceltrain run --simulate-devices 1` over plain `python` "
                  f"(start-up included; both on JAX, the same machine, minutes apart; one run of each: {noise}): median {statistics.median(values):.2f}x, from {min(values):.2f}x to "
                  f"{max(values):.2f}x over {len(ratios)} scripts.", "", "| script | run-1 / plain |", "|---|---|"]
        lines += [f"| {name} | {ratio:.2f}x |" for name, ratio in ratios]
    return "\n".join(lines)


# Quotes whose figures a busy machine does not change (pass or fail):
# quoted from a loaded record too (render.py).
LOAD_FREE = ("table",)


def quotes(summary: dict, record: dict) -> dict:
    """`table`: README's table of every script and mode, with acceltrain's verdict."""
    modes = list(summary["rows"][0]["cells"]) if summary["rows"] else []
    header = ["shape", "script", *modes, "acceltrain's verdict (its closing line)"]
    lines = [f"Made from the record of `{record['command']}` ({_results.cite(record)}; runs dated {dates(summary)}); a "
             "cell is `pass` when the run exits 0, prints the plain run's metrics (bit for bit at 1 device but for a metric "
             "TensorFlow's own plain runs round a few ulps apart, within `tests/corpus.py`'s tolerance otherwise) and exactly the expected acceltrain warnings, and leaves no "
             "process behind.", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in summary["rows"]:
        cells = [row["what"], f"`{row['script']}`", *row["cells"].values(), row["status"].replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    return {"table": "\n" + "\n".join(lines) + "\n"}


if __name__ == "__main__":
    main()
