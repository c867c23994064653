"""How fast does the seed's MNIST job train per epoch: plain Keras on TensorFlow, acceltrain, a hand loop.

    python benchmarks/epoch_speed.py [--epochs 6] [--repeats 2]

Runs `acceltrain bench` (src/acceltrain/commands/bench.py: each variant in its own process, the variants
interleaved, the best steady epoch of `--repeats` runs each) and writes BENCHMARKS.md's section
"epoch-speed" with the table and the targets of issues #2 and #5, met or not.
"""

import argparse
import json
import statistics
import sys

from _report import machine, write_section

from acceltrain.commands import bench

# (ratio name, its label, the bound, at least or at most); issue #2's targets, then #5's tighter ones.
TARGETS = (
    ("plain_over_acceltrain", "acceltrain faster per epoch than the best plain TF-default run (#2)", 1.4, "≥"),
    ("acceltrain_over_hand", "acceltrain's epoch over the hand loop's (#2)", 1.10, "≤"),
    ("plain_over_acceltrain", "acceltrain faster per epoch than the best plain TF-default run (#5)", 1.5, "≥"),
    ("acceltrain_over_hand", "acceltrain's epoch over the hand loop's (#5)", 1.05, "≤"),
)


def targets(report: dict) -> list[str]:
    lines = ["| target | fastest epochs | median epochs | bound | met (fastest, median) |", "|---|---|---|---|---|"]
    for key, label, bound, sense in TARGETS:
        values = report["ratios"][key], report["median_ratios"][key]
        met = ["yes" if (v >= bound if sense == "≥" else v <= bound) else "no" for v in values]
        lines.append(f"| {label} | {values[0]:.3f}× | {values[1]:.3f}× | {sense} {bound}× | {', '.join(met)} |")
    fraction = report["variants"]["acceltrain"]["fraction_of_ceiling"]
    lines.append(f"| acceltrain's training FLOP/s of the measured matmul ceiling (#5) | {100 * fraction:.0f}% | | ≥ 80% | "
                 f"{'yes' if fraction >= 0.8 else 'no'} |")
    cut = report["compilation_cache"].get("cut")
    if cut is not None:
        lines.append(f"| warm compilation cache: less time to the end of the first epoch (#5) | {100 * cut:.0f}% | | "
                     f"≥ 30% | {'yes' if cut >= 0.3 else 'no'} |")
    return lines


def why_plain_is_hard_to_beat(report: dict) -> str:
    """The ceiling on 'faster than plain Keras', from this run's own figures only."""
    plain = report["variants"]["plain"]
    fraction = plain["fraction_of_ceiling"]
    if not fraction:
        return ""
    xla = {True: "with XLA (Keras resolved its `jit_compile='auto'` to True)",
           False: "without XLA (Keras resolved its `jit_compile='auto'` to False)"}.get(plain.get("jit_compile"), "")
    bound = (f"so no path can be more than {1 / fraction:.2f}× faster than it here" if fraction < 1 else
             "above the single-matmul ceiling, which therefore bounds nothing here")
    return (f"How far plain Keras can be beaten on this machine: its fit on {plain['backend']} ran {xla} and reached "
            f"{fraction:.0%} of the measured matmul ceiling in this run, {bound}.").replace(" ran  and", " ran and")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", help="also write the report as JSON here")
    parser.add_argument("--backend", choices=("jax", "tensorflow"), default="jax",
                        help="acceltrain's backend (b); its own section of BENCHMARKS.md")
    args = parser.parse_args()
    report = bench.run(bench.BenchConfig(epochs=args.epochs, repeats=args.repeats, backend=args.backend))
    table = bench.format_table(report)
    print(table)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(report, file, indent=2)
    runs = "; ".join(f"{v['label']}: " + ", ".join(f"{statistics.median(r['epoch_seconds'][1:]):.2f}" for r in v["runs"])
                     for v in report["variants"].values())
    on_tf = args.backend == "tensorflow"
    write_section(
        "epoch-speed-tensorflow" if on_tf else "epoch-speed",
        "## Epoch speed of the seed's MNIST job: plain Keras, acceltrain"
        + (" on TensorFlow" if on_tf else "") + ", a hand-written loop, the ceiling\n\n"
        f"`python benchmarks/epoch_speed.py --epochs {args.epochs} --repeats {args.repeats}"
        + (" --backend tensorflow" if on_tf else "") + f"` on {machine()}. "
        "Each variant runs in its own process, interleaved (acceltrain, plain, hand, acceltrain, plain, hand), "
        f"{args.repeats} runs each. Steady epochs are those after each run's first; the table gives each "
        "variant's fastest (other work on this shared machine only ever adds time, so the fastest is the best "
        "estimate of the variant's own speed) and their median (how much the load added). The matmul ceiling "
        "is the best of one measurement a round. Ratios > 1 mean the second is faster.\n\n"
        + table + "\n\n" + "\n".join(targets(report))
        + f"\n\nEach run's median steady epoch, in the order run (s): {runs}."
        + "\n\n" + why_plain_is_hard_to_beat(report),
    )
    print("\n".join(targets(report)), file=sys.stderr)


if __name__ == "__main__":
    main()
