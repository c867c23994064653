"""What the shared compile cache saves a restarted job: its compilation and its time to the first step, cold
(an empty JAX compilation cache) against warm (the cache the same job's first run filled).

    python benchmarks/compile_cache.py [--rounds 3] [--quick]

The job is what `launch --emit` runs on every host: `acceltrain run --checkpoint-dir DIR --resume
tests/scripts/slurm_fit.py`, one process, JAX_COMPILATION_CACHE_DIR a folder of the round's own. Each round
runs it cold (the folder empty), then again in a new checkpoint folder with the folder as the first run left
it: a restarted or requeued job compiles the same programs. Each run writes its ledger (--ledger): the
compilation part, and the time to the first step (start-up + compilation, which come before any step). The
warm run's figures over the cold run's, judged against the rounds' spread (benchmarks/_noise.py). Records the
section "compile-cache". --quick: 1 round, 1 epoch.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _noise, _results  # noqa: E402

SECTION = "compile-cache"
SCRIPT = _results.REPO / "tests" / "scripts" / "slurm_fit.py"
WAYS = ("cold", "warm")


def run_once(folder: Path, cache: Path, name: str, epochs: int) -> dict:
    """One `acceltrain run` of the job; its ledger's compilation, time to first step, wall."""
    ledger = folder / f"{name}.ledger.json"
    command = [sys.executable, "-m", "acceltrain", "run", "--ledger", str(ledger), "--checkpoint-dir",
               str(folder / name), "--resume", str(SCRIPT), str(folder / name), "--epochs", str(epochs)]
    environment = {**os.environ, "PYTHONPATH": str(_results.REPO / "src"), "JAX_COMPILATION_CACHE_DIR": str(cache)}
    done = subprocess.run(command, capture_output=True, text=True, env=environment)
    if done.returncode:
        sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
    parts = json.loads(ledger.read_text())["parts"]
    return {"compilation": parts["compilation"], "to_first_step": parts["start_up"] + parts["compilation"],
            "wall": sum(parts.values()), "cached_programs": len(list(cache.iterdir())), "load": os.getloadavg()[0]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    rounds, epochs = (1, 1) if args.quick else (args.rounds, 2)
    runs = {way: [] for way in WAYS}
    for round_ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="acceltrain-bench-", dir=os.environ.get("BENCH_DIR")) as folder:
            folder, cache = Path(folder), Path(folder) / "cache"
            cache.mkdir()
            for way in WAYS:  # the same cache: the warm run is the cold run's job restarted
                runs[way].append(run_once(folder, cache, way, epochs))
                print(f"round {round_ + 1}: {way}: {runs[way][-1]}", file=sys.stderr, flush=True)
    run.save(SECTION, {"rounds": rounds, "epochs": epochs, "runs": runs})


# --- Rendering ----------------------------------------------------------------------------------

def summarize(raw: dict) -> dict:
    figures = {}
    for figure in ("compilation", "to_first_step"):
        cold = [r[figure] for r in raw["runs"]["cold"]]
        warm = [r[figure] for r in raw["runs"]["warm"]]
        difference = _noise.compare(cold, warm)
        figures[figure] = {"cold": statistics.median(cold), "warm": statistics.median(warm),
                           "ratio": difference.ratio, "noise": difference.noise, "verdict": difference.verdict}
    loads = [r["load"] for runs in raw["runs"].values() for r in runs]
    paired = {figure: [warm[figure] / cold[figure] for cold, warm in zip(raw["runs"]["cold"], raw["runs"]["warm"])]
              for figure in figures}
    return {"rounds": raw["rounds"], "epochs": raw["epochs"], "figures": figures, "loads": [min(loads), max(loads)],
            "paired": paired,
            "programs": statistics.median(r["cached_programs"] for r in raw["runs"]["cold"])}


def _difference(figure: dict) -> _noise.Difference:
    return _noise.Difference(figure["ratio"], figure["noise"], figure["verdict"])


def render(summary: dict, record: dict) -> str:
    cores = record["machine"].get("cores")
    words = {"compilation": "compilation (the ledger's part)", "to_first_step": "time to the first step (start-up + "
                                                                               "compilation)"}
    table = ["| figure | cold (median) | warm (median) | warm / cold |", "|---|---|---|---|"]
    for name, figure in summary["figures"].items():
        table.append(f"| {words[name]} | {figure['cold']:.2f} s | {figure['warm']:.2f} s | "
                     f"{_difference(figure).says('{:.2f}×')} |")
    return (
        "## The compile cache a restarted job finds\n\n"
        f"`{record['command']}`; JAX, one process, `acceltrain run --checkpoint-dir DIR --resume` of "
        f"tests/scripts/slurm_fit.py ({summary['epochs']} epoch(s)), as `launch --emit` runs it on every host. "
        f"Each of {summary['rounds']} round(s) runs it with an empty JAX_COMPILATION_CACHE_DIR (cold), then again "
        f"with the cache the first run filled ({summary['programs']:.0f} programs; warm), as a restarted or requeued "
        "job finds it. The figures are each run's ledger; the ratio is judged against the larger spread over the "
        f"rounds (benchmarks/_noise.py). Its runs started at {_results.load_range(summary['loads'], cores)}.\n\n"
        + "\n".join(table)
        + "\n\nWithin each round (the cold run, then its restart): warm / cold compilation "
        + ", ".join(f"{ratio:.2f}×" for ratio in summary["paired"]["compilation"]) + "; time to the first step "
        + ", ".join(f"{ratio:.2f}×" for ratio in summary["paired"]["to_first_step"]) + "."
    )


def quotes(summary: dict, record: dict) -> dict:
    figures = summary["figures"]
    return {"summary": "A restarted job with the shared compile cache its first run filled, against the cold start "
                       f"({_results.cite(record)}): compilation {_difference(figures['compilation']).says('{:.2f}×')}; "
                       f"time to the first step {_difference(figures['to_first_step']).says('{:.2f}×')}."}


if __name__ == "__main__":
    main()
