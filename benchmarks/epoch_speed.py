"""How fast does the seed's MNIST job train per epoch: plain Keras, acceltrain, a hand loop, in one precision.

    python benchmarks/epoch_speed.py [--batch-sizes 32 128 1200] [--epochs 4] [--repeats N] [--backend jax|tensorflow]
                                     [--quick]

Runs `acceltrain bench` (src/acceltrain/commands/bench.py: each variant in its own process, the variants
interleaved, every one in the dtype policy acceltrain runs) once per batch size, with its variant (e), the recipe as a
plain Keras script under `acceltrain run` (issue #43 names both Runtime.fit and it), and records its reports: the
section "epoch-speed" (acceltrain on JAX) or "epoch-speed-tensorflow", with issue #43's targets, met or not. On a
GPU machine, benchmarks/gpu_check.sh records the section "epoch-speed-gpu" with it. --quick: 2 epochs on 2,400
samples at batch 1,200, 2 runs each.

Every figure is a median: each run's median steady epoch (after its first), a variant's median of those, and the
noise of a ratio the larger spread of the two variants' run medians (benchmarks/_noise.py): the verdict and its noise
come from the same statistic. Beside each wall time, the process's CPU time (user + system, all its threads) a steady
epoch, by the same medians and judged the same way: a neighbour's load stretches a wall time far more than a CPU time.
Runs a batch size: REPEATS (more at the small batches, where a run's figure moved most from run to run: a process
fast in one run and slow in the next shows as a spread, and enough runs say which is the usual one). Records made
before bench ran plain Keras in acceltrain's precision (plain Keras then ran in Keras's default, float32) say so, and
give no verdict on a ratio of unlike precisions.
"""

import argparse
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _noise, _results  # noqa: E402

SECTIONS = {"jax": "epoch-speed", "tensorflow": "epoch-speed-tensorflow"}
BATCH_SIZES = (32, 128, 1200)  # issue #43's: small steps, where a loop's overhead shows, and the recipe's own
# Runs of each variant a batch size (--repeats: one count for all). About 80 s a round at 32, 60 at 128 and 50 at 1,200
# on the project's 2 cores (the quiet record of f07e52e's rounds): 5, 4 and 2 rounds fit a quiet rerun in about 12 min.
REPEATS = {32: 5, 128: 4, 1200: 2}
DEFAULT_REPEATS = 3  # any other batch size
# (numerator, denominator); those of (e), the plain script under `acceltrain run`, where the record has it
PAIRS = (("plain", "acceltrain"), ("acceltrain", "hand"), ("plain", "hand"), ("script", "hand"), ("plain", "script"))
# Issue #43's targets: (ratio, its label, the bound on a CPU, on an accelerator, at least or at most).
TARGETS = (
    ("acceltrain_over_hand", "acceltrain's steady epoch over the hand-written scanned epoch's (#43)", 1.15, 1.5, "≤"),
    ("plain_over_acceltrain", "plain Keras's steady epoch over acceltrain's: no slower than plain (#43)", 1.0, 1.0, "≥"),
    ("script_over_hand", "a plain script under `acceltrain run`: its steady epoch over the hand-written scanned "
                         "epoch's (#43)", 1.15, 1.5, "≤"),
    ("plain_over_script", "plain Keras's steady epoch over the script's under `acceltrain run` (#43)", 1.0, 1.0, "≥"),
)
# Keras's own default dtype policy: what bench ran plain Keras in before it ran it in acceltrain's precision.
KERAS_DEFAULT_PRECISION = "float32"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=list(BATCH_SIZES), metavar="N",
                        help=f"one bench a batch size, in turn (default: {' '.join(map(str, BATCH_SIZES))})")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--repeats", type=int, help="runs of each variant at every batch size (default: REPEATS, "
                        + ", ".join(f"{runs} at {batch}" for batch, runs in REPEATS.items())
                        + f", {DEFAULT_REPEATS} at any other)")
    parser.add_argument("--samples", type=int, help="train on the first N samples (default: all 60,000)")
    parser.add_argument("--backend", choices=tuple(SECTIONS), default="jax",
                        help="acceltrain's backend (b); each has its own section")
    parser.add_argument("--section", help="the record's section (default: by backend; a GPU run: epoch-speed-gpu)")
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    from acceltrain.commands import bench

    reports = []
    for batch_size in ([1200] if args.quick else args.batch_sizes):
        config = bench.BenchConfig(epochs=2 if args.quick else args.epochs,
                                   repeats=2 if args.quick else repeats(batch_size, args.repeats),
                                   backend=args.backend,
                                   samples=2400 if args.quick else args.samples, batch_size=batch_size,
                                   script=True)
        reports.append(bench.run(config, reading=run.reading))  # its line judges the record's own reading
        print(bench.format_table(reports[-1]), flush=True)
    run.save(args.section or SECTIONS[args.backend], {"reports": reports})


def repeats(batch_size: int, asked: int | None = None) -> int:
    """The runs of each variant at `batch_size`: the ones asked for, else REPEATS's."""
    return asked or REPEATS.get(batch_size, DEFAULT_REPEATS)


# --- Rendering ----------------------------------------------------------------------------------

def _runs_medians(variant: dict, key: str = "epoch_seconds") -> list[float]:
    """Each run's median steady epoch; of `key` "epoch_cpu_seconds", its CPU time ([] in a record made before bench
    measured it)."""
    if any(key not in r for r in variant["runs"]):
        return []
    return [statistics.median(r[key][1:] or r[key]) for r in variant["runs"]]


def summarize_one(report: dict) -> dict:
    """One batch size's figures, from `acceltrain bench`'s report (which keeps every run's epochs): all medians."""
    inferred = "one_precision" not in report  # a report of the bench that ran plain Keras in Keras's default
    ceiling = report["ceiling"]
    flops = report["flops_per_sample"]
    variants = {}
    for name, v in report["variants"].items():
        medians = _runs_medians(v)
        median = statistics.median(medians)
        cpu_medians = _runs_medians(v, "epoch_cpu_seconds")
        samples = v.get("samples_per_epoch", report["samples_per_epoch"])
        precision = v.get("precision") or (KERAS_DEFAULT_PRECISION if name == "plain" else report["precision"])
        train_flops = flops * samples / median if flops else None
        # a share of the ceiling only in the dtype the ceiling ran in: a variant computing in another has none here
        same_dtype = precision.removeprefix("mixed_") == ceiling["dtype"]
        variants[name] = {
            "label": v["label"], "backend": v["backend"], "jit_compile": v["jit_compile"],
            "precision": precision, "default_precision": v.get("default_precision"),
            "median": median, "run_medians": medians, "spread": _noise.spread(medians),
            "cpu_median": statistics.median(cpu_medians) if cpu_medians else None, "cpu_run_medians": cpu_medians,
            "cpu_spread": _noise.spread(cpu_medians),
            "threads": sorted({count for r in v["runs"] for count in r.get("threads") or () if count is not None}),
            "samples_per_second": samples / median, "first_epoch_end": v["seconds_to_first_epoch_end"],
            "train_flops": train_flops,
            "of_ceiling": train_flops / ceiling["flops_per_second"] if train_flops and same_dtype else None,
            "of_peak": (train_flops / ceiling["published_peak_flops_per_second"]
                        if train_flops and same_dtype and ceiling["published_peak_flops_per_second"] else None),
        }
    cache = report["compilation_cache"]
    return {
        "batch_size": report["batch_size"], "samples_per_epoch": report["samples_per_epoch"],
        "epochs": report["config"]["epochs"], "repeats": report["config"]["repeats"],
        "checkpoints": bool(report["config"].get("checkpoints")),
        "runtime": {key: report["runtime"][key] for key in
                    ("backend", "platform", "num_devices", "device_kind", "simulated_devices")},
        "precision": report["precision"], "compute_dtype": report["compute_dtype"], "flops_per_sample": flops,
        "precision_inferred": inferred,
        "one_precision": len({v["precision"] for v in variants.values()}) == 1,
        "variants": variants,
        "ceiling": {"dtype": ceiling["dtype"], "matmul_size": ceiling["matmul_size"],
                    "flops_per_second": ceiling["flops_per_second"],
                    "published_peak": ceiling["published_peak_flops_per_second"], "of_peak": ceiling["fraction_of_peak"]},
        "cache": {key: cache.get(key) for key in ("cold_seconds_to_first_epoch_end", "warm_seconds_to_first_epoch_end",
                                                  "cold_fit_to_first_epoch_end", "warm_fit_to_first_epoch_end", "cut")},
    }


def summarize(raw: dict) -> dict:
    """Every batch size's figures; a record of one bench (before --batch-sizes) is one batch size."""
    reports = raw.get("reports") or [raw]
    batches = [summarize_one(report) for report in reports]
    first = batches[0]
    return {"backend": reports[0]["config"]["backend"] or reports[0]["runtime"]["backend"],
            "recipe": reports[0]["recipe"], "runtime": first["runtime"], "batches": batches}


def comparable(batch: dict, a: str, b: str) -> bool:
    """Whether two variants ran in the same precision: a ratio of unlike precisions gets no verdict."""
    return batch["variants"][a]["precision"] == batch["variants"][b]["precision"]


def pairs(batch: dict) -> list[tuple[str, str]]:
    """The PAIRS whose two variants ran (a record made before bench had (e) has no script)."""
    return [(a, b) for a, b in PAIRS if a in batch["variants"] and b in batch["variants"]]


def differences(batch: dict, medians: str = "run_medians") -> dict:
    """Each pair's ratio of medians, judged against the larger spread of the two variants' run medians; None for a
    pair that ran in unlike precisions. `medians` "cpu_run_medians": the same of their CPU times (None for a pair of
    which one has none: a record made before bench measured it)."""
    variants = batch["variants"]
    return {f"{a}_over_{b}": (_noise.compare(variants[b][medians], variants[a][medians])
                              if comparable(batch, a, b) and variants[a].get(medians) and variants[b].get(medians)
                              else None)
            for a, b in pairs(batch)}


def cache_difference(batch: dict) -> _noise.Difference | None:
    """Warm over cold time to the first epoch's end: one cold run a bench, so its noise is never measured."""
    cache = batch["cache"]
    if cache["warm_seconds_to_first_epoch_end"] is None:
        return None
    return _noise.judge(cache["warm_seconds_to_first_epoch_end"] / cache["cold_seconds_to_first_epoch_end"], [None])


def unlike_words(batch: dict, a: str, b: str) -> str:
    va, vb = batch["variants"][a], batch["variants"][b]
    return (f"not compared with {b}: {a} ran in {va['precision']}, {b} in {vb['precision']} (unlike precisions: "
            f"{va['median'] / vb['median']:.2f}× is a ratio of unlike work, no verdict)")


def said_ratio(batch: dict, a: str, b: str, form: str = "{:.2f}×") -> str:
    judged = differences(batch)[f"{a}_over_{b}"]
    return judged.says(form) if judged is not None else unlike_words(batch, a, b)


def _giga(value) -> str:
    if value is None:
        return "n/a"
    return f"{value / 1e12:.1f} T" if value >= 1e12 else f"{value / 1e9:.1f} G"


def _percent(value) -> str:
    """37%; under 1%, two decimals (a small job on a GPU: 0.37%), so that no measured share reads as none."""
    if value is None:
        return "n/a"
    return f"{100 * value:.2f}%" if 0 < value < 0.01 else f"{100 * value:.0f}%"


def _precision(batch: dict, variant: dict, name: str) -> str:
    """The policy a variant ran in, and its own default beside it, labelled."""
    if name == "plain":
        default = ("Keras's default, as bench then ran it" if batch["precision_inferred"] else
                   f"its default: {variant['default_precision']}")
    else:
        default = {"acceltrain": "acceltrain's choice", "script": "acceltrain run's choice"}.get(name,
                                                                                                "follows acceltrain")
    return f"{variant['precision']} ({default})"


def table(batch: dict) -> list[str]:
    """The batch size's table; a record made before bench measured CPU time has no CPU columns."""
    flops = batch["flops_per_sample"]
    with_cpu = any(v.get("cpu_median") is not None for v in batch["variants"].values())
    lines = [
        f"Batch {batch['batch_size']}: {batch['samples_per_epoch']} samples an epoch; {batch['epochs']} epochs × "
        f"{batch['repeats']} runs each; acceltrain in {batch['precision']} (compute in {batch['compute_dtype']}); "
        + (f"{flops / 1e6:.2f} MFLOP a sample (forward and backward)" if flops else "FLOP count unknown for this model")
        + ("; acceltrain checkpoints every epoch" if batch["checkpoints"] else ""),
        "",
        "| | backend | precision | median epoch | spread of runs | " + ("CPU an epoch | its spread | " if with_cpu else "")
        + "samples/s | to first epoch end | train FLOP/s | of ceiling | of peak |",
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if with_cpu else ""),
    ]
    for name, v in batch["variants"].items():
        cpu = v.get("cpu_median")
        cpu_cells = (f"{f'{cpu:.3f} s' if cpu is not None else 'n/a'} | {_spread(v.get('cpu_spread'))} | "
                     if with_cpu else "")
        lines.append(f"| {v['label']} | {v['backend']} | {_precision(batch, v, name)} | {v['median']:.3f} s | "
                     f"{_spread(v['spread'])} | {cpu_cells}"
                     f"{v['samples_per_second']:,.0f} | {v['first_epoch_end']:.1f} s | {_giga(v['train_flops'])} | "
                     f"{_percent(v['of_ceiling'])} | {_percent(v['of_peak'])} |")
    c = batch["ceiling"]
    lines.append(f"| (d) matmul ceiling | jax | {c['dtype']}, {c['matmul_size']}³ | | | {'| | ' if with_cpu else ''}"
                 f"| | {_giga(c['flops_per_second'])} | 100% | {_percent(c['of_peak'])} |")
    return lines


def _spread(value) -> str:
    return _noise.percent(value) if value is not None else "n/a"


def ratios_line(batch: dict) -> str:
    return ("Median epoch ratios, judged against the larger spread of the two variants' run medians "
            "(benchmarks/_noise.py): " + "; ".join(f"{a} / {b} {said_ratio(batch, a, b, '{:.3f}×')}"
                                                    for a, b in pairs(batch)) + ".")


def cpu_ratios_line(batch: dict) -> str:
    """The same ratios of CPU time a steady epoch, each judged against the spread of the CPU medians; empty for a
    record made before bench measured CPU time."""
    judged = {key: value for key, value in differences(batch, "cpu_run_medians").items() if value is not None}
    if not judged:
        return ""
    return ("The same of the processes' CPU time a steady epoch (user + system, all threads; judged against the "
            "spread of the CPU medians): " + "; ".join(f"{key.replace('_over_', ' / ')} {value.says('{:.3f}×')}"
                                                      for key, value in judged.items()) + ".")


def targets(summary: dict) -> list[str]:
    on_cpu = summary["runtime"]["platform"] == "cpu"
    lines = ["| target | batch | median epochs | bound | met |", "|---|---|---|---|---|"]
    for batch in summary["batches"]:
        judged = differences(batch)
        for key, label, cpu_bound, other_bound, sense in TARGETS:
            if key not in judged:  # a record with no script
                continue
            bound = cpu_bound if on_cpu else other_bound
            if judged[key] is None:
                lines.append(f"| {label} | {batch['batch_size']} | unlike precisions | {sense} {bound}× | not judged |")
                continue
            value, noise = judged[key].ratio, judged[key].noise
            met = "yes" if (value >= bound if sense == "≥" else value <= bound) else "no"
            if noise is None or abs(value / bound - 1) <= noise:  # the run cannot tell the ratio from the bound
                met += " (the bound lies within this run's noise)" if noise is not None else " (noise unknown)"
            lines.append(f"| {label} | {batch['batch_size']} | {judged[key].says('{:.3f}×')} | {sense} {bound}× | "
                         f"{met} |")
    return lines


def why_plain_is_hard_to_beat(batch: dict) -> str:
    """The ceiling on 'faster than plain Keras', from this run's own figures only."""
    plain = batch["variants"]["plain"]
    fraction = plain["of_ceiling"]
    if not fraction:
        return ""
    xla = {True: "with XLA (Keras resolved its `jit_compile='auto'` to True)",
           False: "without XLA (Keras resolved its `jit_compile='auto'` to False)"}.get(plain.get("jit_compile"), "")
    bound = (f"so no path can be more than {1 / fraction:.2f}× faster than it here" if fraction < 1 else
             "above the single-matmul ceiling, which therefore bounds nothing here")
    return (f"How far plain Keras can be beaten on this machine: at batch {batch['batch_size']} its fit on "
            f"{plain['backend']} ran {xla} and reached {_percent(fraction)} of the measured "
            f"{batch['ceiling']['dtype']} matmul ceiling in this run, {bound}.").replace(" ran  and", " ran and")


def render(summary: dict, record: dict) -> str:
    on_tf = summary["backend"] == "tensorflow"
    runtime = summary["runtime"]
    batches = summary["batches"]
    lines = [
        "## Epoch speed of the seed's MNIST job" + ("" if runtime["platform"] == "cpu" else
                                                     f" on {runtime['num_devices']} × {runtime['device_kind']}")
        + ": plain Keras, acceltrain" + (" on TensorFlow" if on_tf else "") + ", a hand-written loop, the ceiling",
        "",
        f"`{record['command']}`. {summary['recipe']}: acceltrain on {runtime['backend']}/{runtime['platform']}, "
        f"{runtime['num_devices']} × {runtime['device_kind']}{' (simulated)' if runtime['simulated_devices'] else ''}. "
        "Each variant runs in its own process, interleaved (acceltrain, "
        + ("the plain script under `acceltrain run`, " if "script" in batches[0]["variants"] else "")
        + "plain, hand, acceltrain, ...). A run's "
        "figure is the median of its steady epochs (those after its first, which compiles); a variant's is the median "
        "of its runs' figures, and its spread, (max - min) / min of them, is the noise its ratios are judged against. "
        "Plain Keras and the hand loop run in acceltrain's precision (each side's own default is labelled beside it); "
        "the ceiling is measured in the compute dtype that ran, the best of one measurement a round. Ratios > 1 mean "
        "the second is faster.",
    ]
    for batch in batches:
        lines += ["", *table(batch), "", ratios_line(batch)]
        if cpu_ratios_line(batch):
            lines.append(cpu_ratios_line(batch))
        if not batch["one_precision"]:
            lines.append("This record compares unlike precisions: "
                         + "; ".join(f"{v['label']} ran in {_precision(batch, v, name)}"
                                     for name, v in batch["variants"].items())
                         + ". Ratios between unlike precisions are shown but not judged, and a variant computing in "
                           "another dtype than the ceiling's has no share of it; a rerun compares in one precision.")
        cache = batch["cache"]
        if cache["warm_seconds_to_first_epoch_end"] is not None:
            lines.append(
                f"Compilation cache, acceltrain's time from process start to the end of the first epoch: "
                f"{cache['cold_seconds_to_first_epoch_end']:.1f} s cold, "
                f"{cache['warm_seconds_to_first_epoch_end']:.1f} s warm ({100 * cache['cut']:.0f}% less; one cold run, "
                f"so {cache_difference(batch).noise_words()}); from fit() start: "
                f"{cache['cold_fit_to_first_epoch_end']:.2f} s cold, {cache['warm_fit_to_first_epoch_end']:.2f} s warm.")
        runs = "; ".join(f"{v['label']}: " + ", ".join(f"{s:.3f}" for s in v["run_medians"])
                         for v in batch["variants"].values())
        lines.append(f"Each run's median steady epoch, in the order run (s): {runs}.")
        cpu_runs = "; ".join(f"{v['label']}: " + ", ".join(f"{s:.3f}" for s in v["cpu_run_medians"])
                             for v in batch["variants"].values() if v.get("cpu_run_medians"))
        if cpu_runs:
            lines.append(f"Its CPU time, the same way (s): {cpu_runs}.")
        threads = "; ".join(f"{v['label']} " + "-".join(str(n) for n in sorted({min(v["threads"]), max(v["threads"])}))
                            for v in batch["variants"].values() if v.get("threads"))
        if threads:
            lines.append(f"The processes' threads at an epoch's end (the OS's count, every run): {threads}.")
    peak = batches[0]["ceiling"]["published_peak"]
    lines += ["", f"Published peak of {runtime['device_kind']} in {batches[0]['ceiling']['dtype']}: "
              + (f"{_giga(peak)}FLOP/s." if peak else "none known (see acceltrain/hardware/)."),
              "", *targets(summary), "", why_plain_is_hard_to_beat(batches[-1])]
    return "\n".join(lines).rstrip()


def quotes(summary: dict, record: dict) -> dict:
    """Single figures of the record's last batch size (`acceltrain-vs-hand`, `plain-vs-acceltrain`, `of-ceiling`,
    `cache-cut`), and `summary`, the sentence the manual quotes: every batch size, a ratio of unlike precisions
    named as such, not judged."""
    last = summary["batches"][-1]
    accel = last["variants"]["acceltrain"]
    said = {
        "acceltrain-vs-hand": said_ratio(last, "acceltrain", "hand", "{:.3f}×"),
        "plain-vs-acceltrain": said_ratio(last, "plain", "acceltrain"),
        "of-ceiling": _percent(accel["of_ceiling"]).replace("%", " %"),
    }
    cut = cache_difference(last)
    if cut is not None:
        said["cache-cut"] = f"{100 * last['cache']['cut']:.0f} % (one cold run: {cut.noise_words()})"
    machine = record["machine"]
    runtime = summary["runtime"]
    where = (f"{machine['cores']} cores of {machine['cpu']}" if runtime["platform"] == "cpu"
             else f"{runtime['num_devices']} × {runtime['device_kind']}")
    parts = []
    for batch in summary["batches"]:
        plain = batch["variants"]["plain"]
        versus_plain = (f"plain Keras on {plain['backend']} over acceltrain's {said_ratio(batch, 'plain', 'acceltrain')}"
                        if comparable(batch, "plain", "acceltrain") else
                        f"plain Keras on {plain['backend']} {unlike_words(batch, 'plain', 'acceltrain')}")
        script = (f", a plain script's under `acceltrain run` {said_ratio(batch, 'script', 'hand', '{:.2f}×')}"
                  if "script" in batch["variants"] else "")
        parts.append(f"at batch {batch['batch_size']}, acceltrain's epoch over the hand-written scanned loop's "
                     f"{said_ratio(batch, 'acceltrain', 'hand', '{:.2f}×')}{script}, {versus_plain}")
    counts = sorted({batch["repeats"] for batch in summary["batches"]})  # runs per batch size may differ (more at 32)
    runs = (f"{counts[0]} runs each" if len(counts) == 1 else "the runs of each: " +
            ", ".join(f"{batch['repeats']} at batch {batch['batch_size']}" for batch in summary["batches"]))
    sentence = (f"On {where} ({_results.cite(record)}; median steady epochs of {runs}, side by "
                f"side, acceltrain in {last['precision']}): " + "; ".join(parts)
                + f"; acceltrain reached {_percent(accel['of_ceiling'])} of the measured {last['ceiling']['dtype']} "
                  f"matmul ceiling at batch {last['batch_size']}")
    said["summary"] = sentence + "."
    return said


if __name__ == "__main__":
    main()
