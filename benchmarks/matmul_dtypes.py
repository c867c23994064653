"""Is bfloat16 faster than float32 on this machine? The matmul throughput of each, side by side.

    python benchmarks/matmul_dtypes.py [--size 2048] [--rounds 5] [--quick]

One JAX process, square matmuls, the dtypes interleaved round by round; each round's figure is the best of 5
timed products, and the rounds' spread is the noise bfloat16's ratio to float32 is judged by. The record
also keeps what acceltrain chooses on this platform (decisions.choose_precision), so the section can say
whether this run supports it. Records the section "matmul-dtypes". --quick: 256³, 2 rounds.
"""

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _noise, _results  # noqa: E402

SECTION = "matmul-dtypes"
PRODUCTS_PER_ROUND = 5


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    n, rounds = (256, 2) if args.quick else (args.size, args.rounds)
    import acceltrain

    acceltrain.connect(verbose=False)  # JAX started as acceltrain starts it (on a CPU-only machine: no libtpu probe)
    import jax
    import jax.numpy as jnp

    from acceltrain import decisions

    matmul = jax.jit(jnp.matmul)
    operands = {}
    for dtype in (jnp.float32, jnp.bfloat16):
        a, b = (jax.random.normal(jax.random.key(i), (n, n), dtype) for i in (1, 2))
        matmul(a, b).block_until_ready()  # compile
        operands[jnp.dtype(dtype).name] = (a, b)
    per_round, seconds = {name: [] for name in operands}, {name: [] for name in operands}
    for _ in range(rounds):
        for name, (a, b) in operands.items():
            timed = []
            for _ in range(PRODUCTS_PER_ROUND):
                start = time.perf_counter()
                matmul(a, b).block_until_ready()
                timed.append(time.perf_counter() - start)
            seconds[name].append(timed)
            per_round[name].append(2 * n**3 / min(timed))
    platform = jax.default_backend()
    policy, reason = decisions.choose_precision(platform, None)
    run.save(SECTION, {"size": n, "rounds": rounds, "products_per_round": PRODUCTS_PER_ROUND, "platform": platform,
                       "flops_per_second": per_round, "product_seconds": seconds, "acceltrain_chooses": {"policy": policy, "reason": reason}})


# --- Rendering ----------------------------------------------------------------------------------

def summarize(raw: dict) -> dict:
    return {**{key: raw[key] for key in ("size", "rounds", "products_per_round", "platform", "acceltrain_chooses")},
            "dtypes": {name: {"best": max(values), "spread": _noise.spread(values),
                              "over_float32": max(values) / max(raw["flops_per_second"]["float32"])}
                       for name, values in raw["flops_per_second"].items()}}


def render(summary: dict, record: dict) -> str:
    dtypes = summary["dtypes"]
    base = dtypes["float32"]
    table = ["| dtype | best GFLOP/s | spread over rounds | / float32 |", "|---|---|---|---|"]
    for name, found in dtypes.items():
        table.append(f"| {name} | {found['best'] / 1e9:.1f} | {_results.not_recorded(found['spread'], '{:.0%}')} | "
                     f"{found['over_float32']:.2f}× |")
    difference = _noise.judge(dtypes["bfloat16"]["over_float32"], (base["spread"], dtypes["bfloat16"]["spread"]))
    verdict = {_noise.LOWER: "ran slower than", _noise.HIGHER: "ran faster than",
               _noise.WITHIN: "ran no faster than"}.get(difference.verdict, "over")
    said = f"bfloat16 {verdict} float32 here: {difference.says()}."
    chooses = summary["acceltrain_chooses"]
    if chooses:
        agrees = {(_noise.LOWER, "float32"): " This run agrees: bfloat16 would buy no speed here.",
                  (_noise.WITHIN, "float32"): " This run agrees: bfloat16 would buy no speed here.",
                  (_noise.HIGHER, "float32"): " This run does not support that choice: bfloat16 was faster.",
                  }.get((difference.verdict, chooses["policy"]), "")
        said += (f" acceltrain's dtype policy on {summary['platform']} when the run was made "
                 f"(decisions.choose_precision): {chooses['policy']}.{agrees}")
    where = "this CPU" if summary["platform"] == "cpu" else f"this {summary['platform'].upper()}"
    return (
        f"## Matmul throughput by dtype on {where}\n\n"
        f"`{record['command']}`: {summary['size']}³ products, the dtypes interleaved over {summary['rounds']} rounds; "
        f"each round's figure the best of {summary['products_per_round']} products. {said}\n\n" + "\n".join(table)
    )


if __name__ == "__main__":
    main()
