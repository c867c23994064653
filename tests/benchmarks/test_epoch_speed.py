"""benchmarks/epoch_speed.py's variant (e), the recipe as a plain Keras script under `acceltrain run`, at a tiny size:
the script runs, its epochs are timed and read back, and the record renders its row. No timing is asserted."""

from acceltrain.commands import bench, machine_load
from benchmarks import epoch_speed


def test_the_plain_script_under_acceltrain_run_is_timed_and_rendered(tmp_path, monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)  # the child sees this machine as a user's run does
    config = bench.BenchConfig(epochs=2, repeats=1, samples=80, batch_size=32, script=True)  # 3 steps, the last partial
    result = bench._run_child("script", config, 32, str(tmp_path), {})
    assert len(result["epoch_seconds"]) == 2 and all(seconds > 0 for seconds in result["epoch_seconds"])
    assert result["samples_per_epoch"] == 80 and result["backend"] == "jax" and result["precision"] == "float32"
    assert result["seconds_to_first_epoch_end"] > result["fit_to_first_epoch_end"] > 0  # start-up counted before fit

    others = {"epoch_seconds": [2.0, 1.0], "seconds_to_first_epoch_end": 3.0, "fit_to_first_epoch_end": 2.0,
              "backend": "jax", "jit_compile": True, "samples_per_epoch": 80, "precision": "float32",
              "default_precision": "float32", "compute_dtype": "float32", "flops_per_sample": 2.64e6,
              "peak_flops_per_second": None, "runtime": {"backend": "jax", "platform": "cpu", "num_devices": 1,
                                                         "device_kind": "cpu", "simulated_devices": False}}
    runs = {"acceltrain": [others], "script": [result], "plain": [others], "hand": [others]}
    ceiling = {"flops_per_second": 2e11, "dtype": "float32", "matmul_size": 2048}
    report = bench._report(config, None, 32, runs, ceiling, machine_load.Reading(0.0, 0.5, None, 0.0))
    assert set(report["ratios"]) == {f"{a}_over_{b}" for a, b in bench.PAIRS}
    summary = epoch_speed.summarize({"reports": [report]})
    lines = epoch_speed.table(summary["batches"][0])
    row = next(line for line in lines if line.startswith("| (e) plain script under acceltrain run |"))
    assert f"| {result['epoch_seconds'][1]:.3f} s |" in row  # its steady epoch, the one after the first
    assert any("acceltrain run" in line for line in epoch_speed.targets(summary))
