"""The guides' pictures, made from real runs and committed records, never drawn by hand.

    python docs/make_figures.py                 # both: a training run (minutes), then the plan chart
    python docs/make_figures.py --only plan     # the plan chart alone (seconds, from the committed record)

- figures/report.png: the report of a real `acceltrain train` run on this machine, as `acceltrain report`
  draws it (the run's own metrics.json);
- figures/plan-big-mlp.png: bytes per device of each candidate distribution of the 1.4-billion-parameter
  MLP on tpu-v5e-8, against the chip's memory, from benchmarks/results/plan-cost.json (the record
  BENCHMARKS.md's plan-cost section and the plan guide's table are rendered from).

figures/figures.json keeps where each came from (the command, the date, the machine and the versions; the
record's sha256), and tests/docs/test_figures.py fails when the record changed but the chart was not
redrawn. Rerun this when the report's or the plan's output changes (DEVELOPERS.md says when).
"""

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _results  # noqa: E402

FIGURES = Path(__file__).resolve().parent / "figures"
PROVENANCE = FIGURES / "figures.json"
PLAN_RECORD = _results.RESULTS / "plan-cost.json"
PLAN_JOB = "~1.4B-param MLP + Adam, batch 1024"
REPORT_EPOCHS = 20  # the seed's whole job: the curves flatten where the cosine schedule reaches 0
GIB = 1024**3


def report_command(out: str, epochs: int = REPORT_EPOCHS) -> list[str]:
    return ["acceltrain", "train", "--epochs", str(epochs), "--out", out]


def make_report(epochs: int) -> dict:
    """Train the seed's job, redraw its report with `acceltrain report`, keep report.png."""
    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "run")
        started = time.time()
        for command in (report_command(out, epochs), ["acceltrain", "report", out]):
            subprocess.run([sys.executable, "-m", "acceltrain", *command[1:]], check=True)
        (FIGURES / "report.png").write_bytes((Path(out) / "report.png").read_bytes())
    return {"command": " ".join(report_command("runs/figure", epochs)), "made": _results.utc(started),
            "machine": _results.machine(), "versions": _results.versions()}


def record_digest(path: Path = PLAN_RECORD) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_plan_chart() -> dict:
    """A bar a candidate: its bytes per device, coloured by whether it fits, against the chip's memory."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from benchmarks import plan_cost

    record = _results.load(PLAN_RECORD)
    job = _results.summary_of(record, plan_cost.summarize)["jobs"][PLAN_JOB]  # measured (raw) or transcribed
    candidates = job["candidates"]
    memory = job["device_memory_bytes"] / GIB
    figure = Figure(figsize=(7.5, 2.8))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    names = [f"{c['distribution']}\n({c['mesh']})" for c in candidates]
    sizes = [c["bytes_per_device"] / GIB for c in candidates]
    colours = ["#2e7d32" if c["fits"] else "#c62828" for c in candidates]
    axes.barh(names, sizes, color=colours)
    axes.invert_yaxis()
    axes.axvline(memory, color="black", linestyle="--", linewidth=1, label=f"{memory:.0f} GiB per chip")
    axes.legend(loc="lower right", frameon=False, fontsize=8)
    for row, (size, candidate) in enumerate(zip(sizes, candidates)):
        verdict = "fits" if candidate["fits"] else "does not fit"
        axes.text(size, row, f" {size:.1f} GiB: {verdict}", va="center", fontsize=8)
    axes.set_xlim(0, max(sizes + [memory]) * 1.45)
    axes.set_xlabel("memory per device, as the TPU compiler reports it (GiB)")
    axes.set_title(f"{job['command']}\n{job['devices']} × {job['compiled_for']}: recommended {job['recommended']}",
                   fontsize=9)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    figure.tight_layout()
    figure.savefig(FIGURES / "plan-big-mlp.png", format="png", dpi=110)
    return {"from": str(PLAN_RECORD.relative_to(_results.REPO)), "job": PLAN_JOB, "record_sha256": record_digest()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("report", "plan"), help="make one figure")
    parser.add_argument("--epochs", type=int, default=REPORT_EPOCHS, help="epochs of the report's run")
    args = parser.parse_args(argv)
    FIGURES.mkdir(exist_ok=True)
    provenance = json.loads(PROVENANCE.read_text()) if PROVENANCE.exists() else {}
    if args.only in (None, "plan"):
        provenance["plan-big-mlp.png"] = make_plan_chart()
    if args.only in (None, "report"):
        provenance["report.png"] = make_report(args.epochs)
    PROVENANCE.write_text(json.dumps(provenance, indent=1, sort_keys=True) + "\n")
    print(f"make_figures: wrote {', '.join(sorted(provenance))} into {FIGURES}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
