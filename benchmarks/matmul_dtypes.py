"""Is bfloat16 faster than float32 on this machine? The matmul throughput of each, side by side.

    python benchmarks/matmul_dtypes.py [--size 2048] [--rounds 5]

The evidence behind decisions.choose_precision's choice of float32 on CPUs. One JAX process, square
matmuls, the dtypes interleaved round by round; best of 5 timed products a round. Writes BENCHMARKS.md's
section "matmul-dtypes".
"""

import argparse
import time

from _report import machine, write_section


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import jax
    import jax.numpy as jnp

    n = args.size
    matmul = jax.jit(jnp.matmul)
    operands = {}
    for dtype in (jnp.float32, jnp.bfloat16):
        a, b = (jax.random.normal(jax.random.key(i), (n, n), dtype) for i in (1, 2))
        matmul(a, b).block_until_ready()  # compile
        operands[jnp.dtype(dtype).name] = (a, b)
    best = {name: 0.0 for name in operands}
    for _ in range(args.rounds):
        for name, (a, b) in operands.items():
            for _ in range(5):
                start = time.perf_counter()
                matmul(a, b).block_until_ready()
                best[name] = max(best[name], 2 * n**3 / (time.perf_counter() - start))
    table = ["| dtype | best GFLOP/s | / float32 |", "|---|---|---|"]
    for name, flops in best.items():
        table.append(f"| {name} | {flops / 1e9:.1f} | {flops / best['float32']:.2f}× |")
    print("\n".join(table))
    write_section(
        "matmul-dtypes",
        "## Matmul throughput by dtype on this CPU (why acceltrain keeps float32 here)\n\n"
        f"`python benchmarks/matmul_dtypes.py --size {n} --rounds {args.rounds}` on {machine()}, JAX "
        f"{jax.__version__}. {n}³ products, the dtypes interleaved; best of {5 * args.rounds} each.\n\n"
        + "\n".join(table),
    )


if __name__ == "__main__":
    main()
