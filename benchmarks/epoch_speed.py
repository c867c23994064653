"""How fast does the seed's MNIST job train per epoch: plain Keras on TensorFlow, acceltrain, a hand loop.

    python benchmarks/epoch_speed.py [--epochs 6] [--repeats 2] [--backend jax|tensorflow] [--quick]

Runs `acceltrain bench` (src/acceltrain/commands/bench.py: each variant in its own process, the variants
interleaved, the best steady epoch of `--repeats` runs each) and records its report: the section
"epoch-speed" (acceltrain on JAX) or "epoch-speed-tensorflow", with the targets of issues #2 and #5, met or
not. On a GPU machine, benchmarks/gpu_check.sh records the section "epoch-speed-gpu" with it. --quick: 2
epochs on 2,400 samples.
"""

import argparse
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _noise, _results  # noqa: E402

SECTIONS = {"jax": "epoch-speed", "tensorflow": "epoch-speed-tensorflow"}
# (ratio name, its label, the bound, at least or at most); issue #2's targets, then #5's tighter ones.
TARGETS = (
    ("plain_over_acceltrain", "acceltrain faster per epoch than the best plain TF-default run (#2)", 1.4, "≥"),
    ("acceltrain_over_hand", "acceltrain's epoch over the hand loop's (#2)", 1.10, "≤"),
    ("plain_over_acceltrain", "acceltrain faster per epoch than the best plain TF-default run (#5)", 1.5, "≥"),
    ("acceltrain_over_hand", "acceltrain's epoch over the hand loop's (#5)", 1.05, "≤"),
)
PAIRS = (("plain", "acceltrain"), ("acceltrain", "hand"), ("plain", "hand"))  # (numerator, denominator)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--backend", choices=tuple(SECTIONS), default="jax",
                        help="acceltrain's backend (b); each has its own section")
    parser.add_argument("--section", help="the record's section (default: by backend; a GPU run: epoch-speed-gpu)")
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    from acceltrain.commands import bench

    config = bench.BenchConfig(epochs=2 if args.quick else args.epochs, repeats=args.repeats, backend=args.backend,
                               samples=2400 if args.quick else None)
    report = bench.run(config)
    print(bench.format_table(report))
    run.save(args.section or SECTIONS[args.backend], report)


# --- Rendering ----------------------------------------------------------------------------------

def summarize(report: dict) -> dict:
    """The figures the section prints, from `acceltrain bench`'s report (which keeps every run's epochs)."""
    variants = {}
    for name, v in report["variants"].items():
        variants[name] = {
            "label": v["label"], "backend": v["backend"], "jit_compile": v["jit_compile"],
            "fastest": v["steady_epoch_seconds"], "median": v["median_steady_epoch_seconds"],
            "samples_per_second": v["samples_per_second"], "first_epoch_end": v["seconds_to_first_epoch_end"],
            "train_flops": v["train_flops_per_second"], "of_ceiling": v["fraction_of_ceiling"],
            "of_peak": v["fraction_of_peak"],
            # each run's median steady epoch: the repeated measurements the noise rule reads
            "run_medians": [statistics.median(r["epoch_seconds"][1:] or r["epoch_seconds"]) for r in v["runs"]],
        }
    ceiling = report["ceiling"]
    cache = report["compilation_cache"]
    return {
        "backend": report["config"]["backend"] or report["runtime"]["backend"],
        "recipe": report["recipe"],
        "runtime": {key: report["runtime"][key] for key in
                    ("backend", "platform", "num_devices", "device_kind", "simulated_devices")},
        "samples_per_epoch": report["samples_per_epoch"], "batch_size": report["batch_size"],
        "epochs": report["config"]["epochs"], "repeats": report["config"]["repeats"],
        "checkpoints": bool(report["config"].get("checkpoints")),
        "compute_dtype": report["compute_dtype"], "flops_per_sample": report["flops_per_sample"],
        "variants": variants,
        "ceiling": {"dtype": ceiling["dtype"], "matmul_size": ceiling["matmul_size"],
                    "flops_per_second": ceiling["flops_per_second"],
                    "published_peak": ceiling["published_peak_flops_per_second"],
                    "of_peak": ceiling["fraction_of_peak"]},
        "ratios": report["ratios"], "median_ratios": report["median_ratios"],
        "cache": {key: cache.get(key) for key in ("cold_seconds_to_first_epoch_end", "warm_seconds_to_first_epoch_end",
                                                  "cold_fit_to_first_epoch_end", "warm_fit_to_first_epoch_end", "cut")},
    }


def differences(summary: dict) -> dict:
    """Each pair's fastest-epoch ratio, judged against the spread of each variant's runs."""
    variants = summary["variants"]
    return {f"{a}_over_{b}": _noise.judge(summary["ratios"][f"{a}_over_{b}"],
                                          (_noise.spread(variants[a]["run_medians"]),
                                           _noise.spread(variants[b]["run_medians"])))
            for a, b in PAIRS}


def cache_difference(summary: dict) -> _noise.Difference | None:
    """Warm over cold time to the first epoch's end: one cold run a bench, so its noise is never measured."""
    cache = summary["cache"]
    if cache["warm_seconds_to_first_epoch_end"] is None:
        return None
    return _noise.judge(cache["warm_seconds_to_first_epoch_end"] / cache["cold_seconds_to_first_epoch_end"], [None])


def _giga(value) -> str:
    if value is None:
        return "n/a"
    return f"{value / 1e12:.1f} T" if value >= 1e12 else f"{value / 1e9:.1f} G"


def _percent(value) -> str:
    """37%; under 1%, two decimals (a small job on a GPU: 0.37%), so that no measured share reads as none."""
    if value is None:
        return "n/a"
    return f"{100 * value:.2f}%" if 0 < value < 0.01 else f"{100 * value:.0f}%"


def table(summary: dict) -> list[str]:
    runtime = summary["runtime"]
    flops = summary["flops_per_sample"]
    lines = [
        f"{summary['recipe']}: acceltrain on {runtime['backend']}/{runtime['platform']}, {runtime['num_devices']} × "
        f"{runtime['device_kind']}{' (simulated)' if runtime['simulated_devices'] else ''}; "
        f"{summary['samples_per_epoch']} samples an epoch at batch {summary['batch_size']}; {summary['epochs']} epochs × "
        f"{summary['repeats']} runs each; compute in {summary['compute_dtype']}; "
        + (f"{flops / 1e6:.2f} MFLOP a sample (forward and backward)" if flops else "FLOP count unknown for this model")
        + ("; acceltrain checkpoints every epoch" if summary["checkpoints"] else ""),
        "",
        "| | backend | fastest epoch | median epoch | samples/s | to first epoch end | train FLOP/s | of ceiling | of peak |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in summary["variants"].values():
        lines.append(f"| {v['label']} | {v['backend']} | {v['fastest']:.3f} s | {v['median']:.3f} s | "
                     f"{v['samples_per_second']:,.0f} | {v['first_epoch_end']:.1f} s | {_giga(v['train_flops'])} | "
                     f"{_percent(v['of_ceiling'])} | {_percent(v['of_peak'])} |")
    c = summary["ceiling"]
    lines.append(f"| (d) matmul ceiling ({c['dtype']}, {c['matmul_size']}³) | jax | | | | | {_giga(c['flops_per_second'])} | "
                 f"100% | {_percent(c['of_peak'])} |")
    return lines


def targets(summary: dict) -> list[str]:
    lines = ["| target | fastest epochs | median epochs | bound | met (fastest, median) |", "|---|---|---|---|---|"]
    plain = summary["variants"]["plain"]["backend"]
    for key, label, bound, sense in TARGETS:
        if plain != "tensorflow":  # a machine with no TensorFlow (the GPU's): plain Keras ran on JAX
            label = label.replace("the best plain TF-default run", f"plain Keras on {plain}")
        values = summary["ratios"][key], summary["median_ratios"][key]
        met = ["yes" if (v >= bound if sense == "≥" else v <= bound) else "no" for v in values]
        lines.append(f"| {label} | {values[0]:.3f}× | {values[1]:.3f}× | {sense} {bound}× | {', '.join(met)} |")
    fraction = summary["variants"]["acceltrain"]["of_ceiling"]
    lines.append(f"| acceltrain's training FLOP/s of the measured matmul ceiling (#5) | {_percent(fraction)} | | ≥ 80% | "
                 f"{'yes' if fraction >= 0.8 else 'no'} |")
    cut = summary["cache"]["cut"]
    if cut is not None:
        lines.append(f"| warm compilation cache: less time to the end of the first epoch (#5) | {100 * cut:.0f}% | | "
                     f"≥ 30% | {'yes' if cut >= 0.3 else 'no'} |")
    return lines


def why_plain_is_hard_to_beat(summary: dict) -> str:
    """The ceiling on 'faster than plain Keras', from this run's own figures only."""
    plain = summary["variants"]["plain"]
    fraction = plain["of_ceiling"]
    if not fraction:
        return ""
    xla = {True: "with XLA (Keras resolved its `jit_compile='auto'` to True)",
           False: "without XLA (Keras resolved its `jit_compile='auto'` to False)"}.get(plain.get("jit_compile"), "")
    bound = (f"so no path can be more than {1 / fraction:.2f}× faster than it here" if fraction < 1 else
             "above the single-matmul ceiling, which therefore bounds nothing here")
    return (f"How far plain Keras can be beaten on this machine: its fit on {plain['backend']} ran {xla} and reached "
            f"{_percent(fraction)} of the measured matmul ceiling in this run, {bound}.").replace(" ran  and", " ran and")


def render(summary: dict, record: dict) -> str:
    on_tf = summary["backend"] == "tensorflow"
    runtime = summary["runtime"]
    r, m = summary["ratios"], summary["median_ratios"]
    judged = differences(summary)
    lines = [
        "## Epoch speed of the seed's MNIST job" + ("" if runtime["platform"] == "cpu" else
                                                     f" on {runtime['num_devices']} × {runtime['device_kind']}")
        + ": plain Keras, acceltrain" + (" on TensorFlow" if on_tf else "") + ", a hand-written loop, the ceiling",
        "",
        f"`{record['command']}`. Each variant runs in its own process, interleaved (acceltrain, plain, hand, "
        f"acceltrain, plain, hand), {summary['repeats']} runs each. Steady epochs are those after each run's first; "
        "the table gives each variant's fastest (other work on a machine only ever adds time, so the fastest is the "
        "best estimate of the variant's own speed) and their median (how much the load added). The matmul ceiling "
        "is the best of one measurement a round. Ratios > 1 mean the second is faster.",
        "",
        *table(summary),
        "",
        f"Epoch ratios, fastest (median): plain / acceltrain {r['plain_over_acceltrain']:.2f}× "
        f"({m['plain_over_acceltrain']:.2f}×), acceltrain / hand {r['acceltrain_over_hand']:.3f}× "
        f"({m['acceltrain_over_hand']:.3f}×), plain / hand {r['plain_over_hand']:.2f}× ({m['plain_over_hand']:.2f}×).",
        "Judged against the spread of each variant's runs (benchmarks/_noise.py), the fastest-epoch ratios: "
        + "; ".join(f"{a} / {b} {judged[f'{a}_over_{b}'].says('{:.3f}×')}" for a, b in PAIRS) + ".",
    ]
    cache = summary["cache"]
    if cache["warm_seconds_to_first_epoch_end"] is not None:
        lines.append(
            f"Compilation cache, acceltrain's time from process start to the end of the first epoch: "
            f"{cache['cold_seconds_to_first_epoch_end']:.1f} s cold, {cache['warm_seconds_to_first_epoch_end']:.1f} s "
            f"warm ({100 * cache['cut']:.0f}% less; one cold run, so {cache_difference(summary).noise_words()}); from fit() "
            f"start: "
            f"{cache['cold_fit_to_first_epoch_end']:.2f} s cold, {cache['warm_fit_to_first_epoch_end']:.2f} s warm.")
    peak = summary["ceiling"]["published_peak"]
    lines.append(f"Published peak of {summary['runtime']['device_kind']} in {summary['ceiling']['dtype']}: "
                 + (f"{_giga(peak)}FLOP/s." if peak else "none known (see acceltrain/hardware/)."))
    runs = "; ".join(f"{v['label']}: " + ", ".join(f"{s:.2f}" for s in v["run_medians"])
                     for v in summary["variants"].values())
    lines += ["", *targets(summary), "", f"Each run's median steady epoch, in the order run (s): {runs}.", "",
              why_plain_is_hard_to_beat(summary)]
    return "\n".join(lines).rstrip()


def quotes(summary: dict, record: dict) -> dict:
    """Single figures (`acceltrain-vs-hand`, `plain-vs-acceltrain`, `of-ceiling`, `cache-cut`) and `summary`,
    the sentence README quotes."""
    judged = differences(summary)
    accel, plain = summary["variants"]["acceltrain"], summary["variants"]["plain"]
    said = {
        "acceltrain-vs-hand": judged["acceltrain_over_hand"].says("{:.3f}×"),
        "plain-vs-acceltrain": judged["plain_over_acceltrain"].says("{:.2f}×"),
        "of-ceiling": f"{100 * accel['of_ceiling']:.0f} %",
    }
    cut = cache_difference(summary)
    if cut is not None:
        said["cache-cut"] = f"{100 * summary['cache']['cut']:.0f} % (one cold run: {cut.noise_words()})"
    machine = record["machine"]
    sentence = (f"On {machine['cores']} cores of {machine['cpu']} ({_results.cite(record)}; fastest steady epochs of "
                f"{summary['repeats']} runs each, measured side by side): acceltrain's epoch over the hand-written "
                f"loop's, {said['acceltrain-vs-hand']}; plain Keras on {plain['backend']} over acceltrain, "
                f"{said['plain-vs-acceltrain']}; acceltrain reached {said['of-ceiling']} of the measured "
                f"{summary['ceiling']['dtype']} matmul ceiling")
    if cut is not None:
        sentence += (f"; a warm compilation cache cut acceltrain's time from process start to the end of the first "
                     f"epoch by {said['cache-cut']}")
    said["summary"] = sentence + "."
    return said


if __name__ == "__main__":
    main()
