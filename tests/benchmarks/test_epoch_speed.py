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
    # the process's CPU time each epoch beside its wall time (both threads of XLA may run it: up to twice the wall),
    # and its threads
    assert len(result["epoch_cpu_seconds"]) == 2 and all(seconds > 0 for seconds in result["epoch_cpu_seconds"])
    assert len(result["threads"]) == 2 and all(count > 1 for count in result["threads"])

    others = {"epoch_seconds": [2.0, 1.0], "epoch_cpu_seconds": [3.0, 1.5], "seconds_to_first_epoch_end": 3.0, "fit_to_first_epoch_end": 2.0,
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
    assert f"| {result['epoch_cpu_seconds'][1]:.3f} s |" in row  # and its CPU time
    assert "| CPU an epoch | its spread |" in lines[2]
    # the CPU times' own ratios, one run each: the noise unknown
    assert f"acceltrain / hand {1.0:.3f}× (noise unknown)" in epoch_speed.cpu_ratios_line(summary["batches"][0])
    assert f"script / hand {result['epoch_cpu_seconds'][1] / 1.5:.3f}× (noise unknown)" in \
        epoch_speed.cpu_ratios_line(summary["batches"][0])
    assert any("acceltrain run" in line for line in epoch_speed.targets(summary))
    rendered = epoch_speed.render(summary, {"command": "python benchmarks/epoch_speed.py"})
    assert f"(e) plain script under acceltrain run {min(result['threads'])}" in rendered  # its threads, every run
    assert "Its CPU time, the same way (s):" in rendered


def test_a_record_made_before_cpu_time_was_measured_renders_without_its_columns():
    run = {"epoch_seconds": [2.0, 1.0, 1.1], "seconds_to_first_epoch_end": 3.0, "fit_to_first_epoch_end": 2.0}
    variant = {"label": "(b) acceltrain", "backend": "jax", "jit_compile": True, "precision": "float32",
               "seconds_to_first_epoch_end": 3.0, "runs": [run, run]}
    report = {"batch_size": 32, "samples_per_epoch": 80, "flops_per_sample": None, "precision": "float32",
              "compute_dtype": "float32", "one_precision": True, "config": {"epochs": 3, "repeats": 2},
              "runtime": {"backend": "jax", "platform": "cpu", "num_devices": 1, "device_kind": "cpu",
                          "simulated_devices": False},
              "variants": {"acceltrain": variant, "hand": {**variant, "label": "(c) hand-written loop"},
                           "plain": {**variant, "label": "(a) plain Keras fit"}},
              "ceiling": {"dtype": "float32", "matmul_size": 2048, "flops_per_second": 2e11,
                          "published_peak_flops_per_second": None, "fraction_of_peak": None},
              "compilation_cache": {}}
    batch = epoch_speed.summarize_one(report)
    assert batch["variants"]["acceltrain"]["cpu_median"] is None
    lines = epoch_speed.table(batch)
    assert "CPU" not in lines[2] and epoch_speed.cpu_ratios_line(batch) == ""
    assert all(line.count("|") == lines[2].count("|") for line in lines[2:])  # every row as wide as the header


def test_the_small_batches_get_more_runs_unless_asked():
    assert [epoch_speed.repeats(batch) for batch in (32, 128, 1200, 64)] == [5, 4, 2, epoch_speed.DEFAULT_REPEATS]
    assert epoch_speed.repeats(32, 7) == 7
