"""bench runs and reports every field. No timing is asserted: these are measurements, not tests."""

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from acceltrain.commands import bench
from acceltrain.hardware import cpu, gpu, tpu

SRC = Path(__file__).resolve().parent.parent / "src"
VARIANT_FIELDS = {"label", "backend", "precision", "default_precision", "jit_compile", "median_epoch_seconds",
                  "run_medians", "spread", "samples_per_epoch", "samples_per_second", "seconds_to_first_epoch_end",
                  "train_flops_per_second", "fraction_of_ceiling", "fraction_of_peak", "runs", "cpu_run_medians"}


def test_bench_cli_prints_the_table_and_writes_every_field(tmp_path):
    report_path = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("XLA_FLAGS", None)  # the children see this machine as a user would
    done = subprocess.run([sys.executable, "-m", "acceltrain", "bench", "--epochs", "3", "--repeats", "2",
                           "--samples", "2400", "--batch-size", "600", "--json", str(report_path)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    for name, label in bench.LABELS.items():
        assert (label in done.stdout) is (name != "script")  # (e) runs where asked (benchmarks/epoch_speed.py)
    assert "plain / acceltrain" in done.stdout and "warm" in done.stdout

    report = json.loads(report_path.read_text())
    assert set(report["variants"]) == {"plain", "acceltrain", "hand"}
    for name, variant in report["variants"].items():
        assert set(variant) == VARIANT_FIELDS | ({"ledgers"} if name == "acceltrain" else set())
        assert variant["median_epoch_seconds"] > 0 and variant["seconds_to_first_epoch_end"] > 0
        assert 0 < variant["fraction_of_ceiling"]
        assert variant["fraction_of_peak"] is None  # no published peak for a CPU
        assert len(variant["runs"]) == 2 and all(len(run["epoch_seconds"]) == 3 for run in variant["runs"])
        # the figure and its noise are one statistic: each run's median steady epoch (after the first)
        medians = [statistics.median(run["epoch_seconds"][1:]) for run in variant["runs"]]
        assert variant["run_medians"] == medians and variant["median_epoch_seconds"] == statistics.median(medians)
        assert variant["spread"] == pytest.approx((max(medians) - min(medians)) / min(medians))
        # the process's CPU time a steady epoch, the same medians
        assert variant["cpu_run_medians"] == [statistics.median(run["epoch_cpu_seconds"][1:]) for run in variant["runs"]]
        assert all(len(run["threads"]) == 3 for run in variant["runs"])
        assert variant["precision"] == "float32"  # acceltrain's on a CPU: every variant runs in it
    assert report["variants"]["plain"]["default_precision"] == "float32"  # Keras's own, labelled
    assert report["variants"]["hand"]["default_precision"] is None and report["one_precision"]
    assert report["variants"]["hand"]["jit_compile"] is None  # not a Keras fit
    assert all(isinstance(report["variants"][name]["jit_compile"], bool) for name in ("plain", "acceltrain"))
    assert report["samples_per_epoch"] == 2400 and report["batch_size"] == 600
    assert report["flops_per_sample"] == 2 * (784 * 512 * 2 + 3 * (512 * 256 + 256 * 128 + 128 * 64 + 64 * 10))
    assert report["ceiling"]["flops_per_second"] > 0 and report["ceiling"]["dtype"] == "float32"
    assert set(report["ratios"]) == {"plain_over_acceltrain", "acceltrain_over_hand", "plain_over_hand"}
    for (a, b), judged in zip(bench.PAIRS, report["ratios"].values()):
        variants = report["variants"]
        assert judged["ratio"] == variants[a]["median_epoch_seconds"] / variants[b]["median_epoch_seconds"]
        assert judged["noise"] == max(variants[a]["spread"], variants[b]["spread"])
    assert "| (a) plain Keras fit | tensorflow | float32 (float32) |" in done.stdout
    assert "every variant in float32 (acceltrain's choice here" in done.stdout
    cache = report["compilation_cache"]
    assert {"cold_seconds_to_first_epoch_end", "warm_seconds_to_first_epoch_end", "cut"} <= set(cache)
    assert report["runtime"]["platform"] == "cpu" and report["precision"] == "float32"
    # bench uses the runs' own ledger: each acceltrain run's Runtime.fit, its parts summing to its wall
    for saved in report["variants"]["acceltrain"]["ledgers"]:
        assert abs(sum(saved["parts"].values()) - saved["wall_seconds"]) <= 1e-6 * saved["wall_seconds"]
        assert saved["parts"]["device_steps"] > 0 and saved["flops_per_step"] > 0
    assert "acceltrain's Runtime.fit, its last run: where the " in done.stdout


@pytest.mark.parametrize("flag, value", [("--epochs", "0"), ("--repeats", "0"), ("--samples", "0"),
                                         ("--batch-size", "0")])
def test_bench_refuses_nonsense_before_running_anything(flag, value):
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, "-m", "acceltrain", "bench", flag, value], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 2
    assert f"Received {flag} 0" in done.stderr and "Traceback" not in done.stderr


def test_training_flops_of_the_seed_mlp_match_the_hand_count():
    from acceltrain.recipes import mnist_mlp

    model = mnist_mlp.build_model()
    # By hand: 2 x (784·512·2 + 3 x (512·256 + 256·128 + 128·64 + 64·10)) = 2.64 MFLOP a sample, forward and
    # backward (the first layer needs no input gradient).
    assert bench.training_flops_per_sample(model) == pytest.approx(2.64e6, rel=1e-3)


def test_training_flops_is_none_for_layers_it_cannot_count():
    import keras

    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3), keras.layers.Flatten(),
                              keras.layers.Dense(2)])
    assert bench.training_flops_per_sample(model) is None


@pytest.mark.parametrize(
    "kind, device_kind, dtype, expected",
    [
        (gpu, "NVIDIA H200", "bfloat16", 989e12),
        (gpu, "NVIDIA H100 PCIe", "bfloat16", 756e12),
        (gpu, "NVIDIA H100 80GB HBM3", "bfloat16", 989e12),
        (gpu, "NVIDIA A100-SXM4-40GB", "float32", 19.5e12),
        (gpu, "Tesla T4", "bfloat16", None),
        (tpu, "TPU v2", "bfloat16", 22.5e12),  # a device is half a v2 chip
        (tpu, "TPU v5 lite", "bfloat16", 197e12),
        (tpu, "TPU v6 lite", "float32", 918e12),  # float32 matmuls run as bfloat16 passes
        (tpu, "TPU v7", "bfloat16", None),
        (cpu, "cpu", "float32", None),
    ],
)
def test_published_peaks(kind, device_kind, dtype, expected):
    assert kind.peak_flops_per_second(device_kind, dtype) == expected


@pytest.mark.parametrize("precision", ["mixed_bfloat16", None])
def test_plain_keras_runs_in_the_precision_acceltrain_ran_and_labels_its_own_default(precision):
    """bench passes acceltrain's dtype policy to the plain child (on a GPU, mixed_bfloat16): plain Keras computes in
    it, and the child records Keras's own default beside it; without one, plain Keras keeps Keras's default."""
    import time

    payload = {"recipe": "mnist-mlp", "samples": 256, "seed": 0, "batch_size": 128, "epochs": 1,
               "started": time.time(), "precision": precision}
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "KERAS_BACKEND": "jax"}
    env.pop("XLA_FLAGS", None)
    done = subprocess.run([sys.executable, "-m", "acceltrain.commands.bench", "plain", json.dumps(payload)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith(bench.RESULT_TAG))
                        [len(bench.RESULT_TAG):])
    assert result["precision"] == (precision or "float32") and result["default_precision"] == "float32"


def test_the_table_shows_each_variant_s_cpu_time_an_epoch_beside_its_wall_time():
    """Each run's median steady epoch of CPU time (user + system, all threads), the variant's median of those and
    their spread, as the wall time's; a child that measured none (an older bench's result) says n/a."""
    from acceltrain.commands import machine_load

    runtime = {"backend": "jax", "platform": "cpu", "num_devices": 1, "device_kind": "cpu", "simulated_devices": False}

    def child(wall, cpu=None):
        return {"epoch_seconds": wall, **({"epoch_cpu_seconds": cpu, "threads": [21] * len(cpu)} if cpu else {}),
                "seconds_to_first_epoch_end": 5.0, "fit_to_first_epoch_end": 2.0, "backend": "jax", "jit_compile": True,
                "samples_per_epoch": 60000, "flops_per_sample": 2.64e6, "runtime": runtime, "precision": "float32",
                "default_precision": "float32", "compute_dtype": "float32", "peak_flops_per_second": None}

    runs = {"acceltrain": [child([3, 2.0, 2.2], [4, 2.9, 3.1]), child([3, 1.5, 1.5], [4, 3.3, 3.3])],
            "plain": [child([3, 1.4, 1.4]), child([3, 1.4, 1.4])],
            "hand": [child([3, 1.5, 1.5], [4, 2.5, 2.5]), child([3, 1.6, 1.6], [4, 2.5, 2.5])]}
    ceiling = {"flops_per_second": 2e11, "dtype": "float32", "matmul_size": 2048}
    config = bench.BenchConfig(epochs=3, repeats=2)
    report = bench._report(config, None, 32, runs, ceiling, machine_load.Reading(0.0, 0.5, None, 0.0))
    assert report["variants"]["acceltrain"]["cpu_run_medians"] == [3.0, 3.3]
    assert report["variants"]["plain"]["cpu_run_medians"] == []
    assert [len(run["threads"]) for run in report["variants"]["acceltrain"]["runs"]] == [3, 3]
    table = bench.format_table(report)
    # the wall time's spread is 40% (1.5 s and 2.1 s a run); the CPU time's 10% (3.0 s and 3.3 s)
    assert "| (b) acceltrain | jax | float32 (float32) | 1.800 s | 40% | 3.150 s | 10% |" in table
    assert "| (a) plain Keras fit | jax | float32 (float32) | 1.400 s | 0% | n/a | n/a |" in table
    assert "| (c) hand-written loop | jax | float32 (float32) | 1.550 s | 7% | 2.500 s | 0% |" in table
    rows = [line for line in table.splitlines() if line.startswith("|")]
    assert all(row.count("|") == rows[0].count("|") for row in rows)


@pytest.mark.parametrize("args, batch", [(["--samples", "10"], "1200, the recipe default"),
                                         (["--samples", "100", "--batch-size", "128"], "128")])
def test_bench_refuses_fewer_samples_than_one_batch_before_running_anything(args, batch, capsys):
    """It ran, exit 0, and printed a table whose hand-written loop had timed no step (0 samples/s, 0.0 GFLOP/s)."""
    from acceltrain.cli import main

    assert main(["bench", *args]) == 2
    captured = capsys.readouterr()
    assert f"Received --samples {args[1]}, fewer than one batch ({batch}): the hand-written loop" in captured.err
    assert "Pass --samples of at least" in captured.err and "Traceback" not in captured.err and captured.out == ""
