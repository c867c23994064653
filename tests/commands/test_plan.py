"""`acceltrain plan`: the targets table, the recommendation, and the training step compiled for a TPU by
libtpu's compile-only client on this CPU (skipped where libtpu is not installed; it is in `dev`)."""

import importlib.util
import json
import math

import pytest

from acceltrain.errors import UsageError
from acceltrain.planning import choose_plan, targets
from tests.support import SCRIPTS

GIB = 1024**3
BIG_MLP = f"{SCRIPTS / 'big_mlp.py'}:build"
needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="libtpu not installed (pip install 'acceltrain[tpu]')")


@pytest.fixture
def libtpu_env(monkeypatch):
    """The variables plan sets for the process before libtpu loads, set here so the test puts them back."""
    import os

    from acceltrain.planning import step

    for name, value in step.LIBTPU_ENV:
        monkeypatch.setenv(name, os.environ.get(name, value))


@pytest.mark.parametrize("name, devices, memory, topology", [
    ("tpu-v5e-8", 8, 16 * GIB, "v5e:2x4"),
    ("v5litepod-16", 16, 16 * GIB, "v5e:4x4"),
    ("tpu-v5e-1", 1, 16 * GIB, "v5e:2x2"),  # libtpu refuses 1x1: one device of a 2x2
    ("tpu-v4-8", 4, 32 * GIB, "v4:2x2x1"),  # v4 names count TensorCores: 4 chips
    ("tpu-v4-128", 64, 32 * GIB, "v4:4x4x4"),
    ("tpu-v2-8", 8, 8 * GIB, "v2:2x2"),  # v2 devices are TensorCores, 8 GiB each
    ("tpu-v5p-8", 4, 95 * GIB, "v5p:2x2x1"),
    ("tpu-v6e-8", 8, 32 * GIB, "v6e:2x4"),
    ("h100-8", 8, 80 * 1000**3, None),  # no compiler for a GPU here: an estimate
])
def test_targets_by_rental_name(name, devices, memory, topology):
    target = targets.resolve(name)
    assert (target.devices, target.device_memory_bytes, target.topology) == (devices, memory, topology)
    assert target.peak_flops_per_device > 0


@pytest.mark.parametrize("device_kind, count, name", [
    ("TPU v5 lite", 8, "tpu-v5e-8"), ("TPU v4", 4, "tpu-v4-8"), ("TPU v3", 8, "tpu-v3-8"), ("TPU v5", 4, "tpu-v5p-8"),
    ("NVIDIA H200", 1, "h200-1"), ("TPU v5 lite", 3, None), ("Tesla T4", 1, None), ("cpu", 8, None),
])
def test_the_rental_name_of_the_hardware_here(device_kind, count, name):
    assert targets.rental_name(device_kind, count) == name


@pytest.mark.parametrize("name", ["tpu-v9-8", "tpu-v5e-3", "tpu-v4-7", "h100-9", "laptop"])
def test_unknown_targets_are_refused_with_the_valid_names(name):
    with pytest.raises(UsageError, match="Valid|holds 1 to"):
        targets.resolve(name)


@pytest.mark.parametrize("candidates, memory, expected", [
    ([("data", 10, True), ("fsdp", 4, True), ("model", 6, True)], 16, "data"),  # no gathers when it fits
    ([("data", 20, False), ("fsdp", 4, True), ("model", 6, True)], 16, "fsdp"),  # the simpler sharding first
    ([("data", 20, False), ("fsdp", 17, False), ("model", 6, True)], 16, "model"),
    ([("data", 20, False), ("fsdp", 17, False), ("model", 18, False)], 16, None),  # nothing fits
    ([("fsdp", 4, True)], 16, "fsdp"),  # asked for one
])
def test_choose_plan(candidates, memory, expected):
    choice, reason = choose_plan(candidates, memory)
    assert choice == expected
    assert ("nothing fits" in reason) == (expected is None)


def test_bad_inputs_exit_2_with_a_message(cli, tmp_path):
    unknown = cli("plan", "--target", "tpu-v9-8")
    assert unknown.returncode == 2 and "tpu-v5e-8" in unknown.stderr and "Traceback" not in unknown.stderr
    batch = cli("plan", "--target", "tpu-v5e-8", "--batch-size", "0")
    assert batch.returncode == 2 and "--batch-size 0" in batch.stderr
    model = cli("plan", "--target", "tpu-v5e-8", "--model", str(tmp_path / "missing.py") + ":build")
    assert model.returncode == 2 and "is not a file" in model.stderr
    memory = cli("plan", "--target", "tpu-v5e-8", "--device-memory", "lots")
    assert memory.returncode == 2 and "--device-memory 'lots'" in memory.stderr
    distribution = cli("plan", "--target", "tpu-v5e-8", "--distribution", "pipeline")
    assert distribution.returncode == 2 and "fsdp" in distribution.stderr


def test_plan_names_its_python_arguments():
    from acceltrain.planning import plan

    with pytest.raises(UsageError, match="batch_size=0"):
        plan("tpu-v5e-8", batch_size=0)
    with pytest.raises(UsageError, match="distribution='pipeline'"):
        plan("tpu-v5e-8", distribution="pipeline")


def test_an_uncompiled_model_is_refused(runtime):
    from acceltrain.planning import plan

    with pytest.raises(UsageError, match="not compiled"):
        plan("here", model=f"{SCRIPTS / 'big_mlp.py'}:uncompiled", batch_size=8, device_memory="1GiB")


@needs_libtpu
def test_mnist_on_v5e_8_is_data_parallel_and_fits(cli):
    result = cli("plan", "--target", "tpu-v5e-8", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert set(plan) == {"target", "devices", "device_memory_bytes", "compiled_for", "candidates", "recommended"}
    assert (plan["devices"], plan["compiled_for"], plan["recommended"]) == (8, "TPU v5 lite", "data")
    data = plan["candidates"][0]
    assert set(data) == {"distribution", "mesh", "bytes_per_device", "fits", "flops_per_step", "step_seconds_at_peak"}
    assert data["distribution"] == "data" and data["fits"] and 0 < data["bytes_per_device"] < 16 * GIB
    assert "TPU_WORKER_HOSTNAMES" not in result.stderr  # libtpu's start-up chatter is kept out of the way


@needs_libtpu
def test_a_1_4b_mlp_does_not_fit_data_parallel_on_a_16_gib_chip(libtpu_env, runtime):
    from acceltrain.planning import plan

    result = plan("tpu-v5e-8", model=BIG_MLP, batch_size=1024, distribution="data")
    data = result.candidates[0]
    assert result.params > 1.3e9
    assert not data.fits and data.bytes_per_device > 16 * GIB  # the compiler's own figure
    # Nothing fits, so the levers, each compiled: bfloat16 compute halves the activations, not Adam's
    # float32 state, so it does not save this one; more chips (fsdp's shares) does.
    assert result.recommended is None
    assert [lever.name for lever in result.levers] == ["bfloat16", "remat", "accumulate", "more chips"]
    assert result.levers[-1].fits


@needs_libtpu
def test_a_1_4b_mlp_fits_sharded_and_its_flops_are_6_params_batch(libtpu_env, runtime):
    from acceltrain.planning import plan

    # The model layout (batch 2 x model 4) compiles faster here than fsdp (41 s vs 59 s measured), and its
    # FLOPs are the compiler's own cost analysis (fsdp's program loops: see planning/step.py).
    result = plan("tpu-v5e-8", model=BIG_MLP, batch_size=1024, distribution="model")
    sharded = result.candidates[0]
    assert result.recommended == "model" and sharded.fits and sharded.bytes_per_device < 16 * GIB
    # 2 flops per multiply-add, forward once and backward twice (input and weight gradients); the first
    # layer needs no input gradient (2% of the weights here) and Adam adds a few flops per weight.
    assert sharded.flops_per_step == pytest.approx(6 * result.params * 1024, rel=0.03)
    assert sharded.step_seconds_at_peak == pytest.approx(sharded.flops_per_step / (8 * 197e12))


@needs_libtpu
@pytest.mark.slow
def test_a_1_4b_mlp_on_v5e_8_recommends_a_sharded_plan(cli):
    result = cli("plan", "--target", "tpu-v5e-8", "--model", BIG_MLP, "--batch-size", "1024", "--json", timeout=900)
    plan = json.loads(result.stdout)
    by_name = {c["distribution"]: c for c in plan["candidates"]}
    assert not by_name["data"]["fits"] and plan["recommended"] in ("fsdp", "model")
    assert by_name[plan["recommended"]]["flops_per_step"] == pytest.approx(6 * 1.3908e9 * 1024, rel=0.03)


def test_here_compiles_with_this_machines_compiler(runtime):
    from acceltrain.planning import plan

    result = plan("here", device_memory="1GiB", distribution="data")
    assert result.devices == 8 and result.compiled_for == "cpu"  # the test process's 8 simulated devices
    assert result.recommended == "data" and result.candidates[0].fits
    assert math.isnan(result.candidates[0].step_seconds_at_peak or math.nan)  # no published peak for a CPU


def test_when_nothing_fits_the_levers_come_in_order_with_figures(runtime):
    from acceltrain.planning import plan

    result = plan("h100-8", device_memory="256KiB", distribution="fsdp")  # estimated: quick
    assert result.recommended is None and "nothing fits" in result.reason
    assert [lever.name for lever in result.levers] == ["bfloat16", "remat", "accumulate", "more chips"]
    assert all(lever.bytes_per_device > 0 for lever in result.levers)
    assert "would help?" in result.table()


def test_gpu_targets_are_an_estimate_that_says_so(runtime):
    from acceltrain.planning import plan

    result = plan("h100-8")
    assert result.compiled_for == "estimate" and "analytic estimate" in result.notes[0]
    assert result.recommended == "data"
    assert result.as_dict()["candidates"][0]["flops_per_step"] > 0


def test_without_libtpu_a_tpu_plan_is_an_estimate_and_says_how_to_get_the_compiler(runtime, monkeypatch):
    from acceltrain.planning import plan, step

    monkeypatch.setattr(step, "libtpu_installed", lambda: False)
    result = plan("tpu-v5e-8", distribution="data")
    assert result.compiled_for == "estimate" and "acceltrain[tpu]" in result.notes[0]


WIDE_MLP = f"{SCRIPTS / 'wide_mlp.py'}:build"


@pytest.mark.parametrize("distribution", ["data", "fsdp"])
def test_here_agrees_with_the_sharding_measure_and_the_real_arrays(distribution, monkeypatch, runtime):
    """The plan for the 8 simulated devices of this process against what `acceltrain train` would place there.

    Like with like: the compiler's argument bytes less the input batch are the weights and optimizer
    variables it lays out; the real arrays' first-device shards hold exactly those. The planner's own
    figure adds the compiler's temporaries (the gradients, XLA's buffers, the activations), so it sits
    between placement.measure's training state (weights, gradients, slots) and 1.3 x that: measured 1.25 x
    for data parallel (temporaries of twice the weights: the gradients and one more weight-sized buffer,
    a quarter of Adam's state) and 1.03 x for fsdp.
    """
    import acceltrain
    from acceltrain import placement
    from acceltrain import user_model
    from acceltrain.planning import plan, step

    compiled = []
    compile_step = step.compile_step
    monkeypatch.setattr(step, "compile_step", lambda *a, **k: compiled.append(compile_step(*a, **k)) or compiled[-1])
    batch_size = 64
    result = plan("here", model=WIDE_MLP, batch_size=batch_size, distribution=distribution, device_memory="64MiB")
    (candidate,) = result.candidates
    assert candidate.fits and result.recommended == distribution and result.compiled_for == "cpu"

    placed = acceltrain.connect(simulate_devices=8, distribution=distribution, verbose=False)
    build = user_model.builder(WIDE_MLP)
    state = placement.measure(placed, build)
    expected_state = state["replicated"] if distribution == "data" else state["by_degree"][8]
    model = placed.build(build)
    with placed.scope():
        model.optimizer.build(model.trainable_variables)  # as fit does: Adam's slots take their weights' layouts
    held = placed.backend_module.first_device_bytes(model.weights + model.optimizer.variables)
    gradients = placed.backend_module.first_device_bytes(model.trainable_weights)

    per_device_batch = batch_size // 8
    batch_bytes = per_device_batch * 512 * 4 + per_device_batch * 4  # float32 features, int32 labels
    assert compiled[0].argument_bytes - batch_bytes == held  # the same weights and slots, to the byte
    # measure() counts slots from their shapes, leaving out Adam's scalar step counter (8 bytes).
    assert held + gradients - expected_state == 8
    assert expected_state <= candidate.bytes_per_device <= 1.3 * expected_state
