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
GEMMA_LORA = f"{SCRIPTS / 'gemma_lm.py'}:tiny_lora"  # keras_hub's Gemma, tiny, with LoRA: dict inputs, (batch, None)
needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="libtpu not installed (pip install 'acceltrain[tpu]')")


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


@pytest.mark.parametrize("target, asked, current, here, expected", [
    ("tpu-v5e-8", "auto", "float32", None, "mixed_bfloat16"),  # TPUs compute in bfloat16 natively
    ("tpu-v4-8", "auto", "float32", None, "mixed_bfloat16"),
    ("tpu-v5e-8", "float32", "float32", None, "float32"),  # asked for: kept where auto would choose bfloat16
    ("h200-8", "auto", "float32", None, "mixed_bfloat16"),  # compute capability 9.0, as on the H200 run measured
    ("h100-8", "auto", "float32", None, "mixed_bfloat16"),
    ("a100-8", "auto", "float32", None, "mixed_bfloat16"),  # 8.0: the first with bfloat16 tensor cores
    ("h100-8", "float32", "float32", None, "float32"),
    ("here", "auto", "float32", ("cpu", None), "float32"),  # a CPU: no bfloat16 speed
    ("here", "auto", "float32", ("gpu", "9.0"), "mixed_bfloat16"),  # the GPU found, by its compute capability
    ("here", "auto", "float32", ("gpu", "7.5"), "float32"),  # a T4: float16 only
    ("here", "auto", "float32", ("tpu", None), "mixed_bfloat16"),  # on a TPU VM
    ("here", "mixed_bfloat16", "float32", ("cpu", None), "mixed_bfloat16"),
    ("tpu-v5e-8", "auto", "mixed_float16", None, "mixed_float16"),  # the caller's own global policy wins under auto
    ("tpu-v5e-8", "float32", "mixed_float16", None, "float32"),  # ... and not over one asked for
])
def test_choose_plan_precision(target, asked, current, here, expected):
    from acceltrain.planning import choose_plan_precision

    found = targets.resolve(target)
    policy, reason = choose_plan_precision(found, asked, current, *([here] if here else []))
    assert policy == expected and reason


def test_bad_inputs_exit_2_with_a_message(cli, tmp_path):
    missing = cli("plan")
    assert missing.returncode == 2 and "Received no --target. Valid: tpu-v2-8" in missing.stderr
    assert "--target here" in missing.stderr and "Traceback" not in missing.stderr
    unknown = cli("plan", "--target", "tpu-v9-8")
    assert unknown.returncode == 2 and "tpu-v5e-8" in unknown.stderr and "Traceback" not in unknown.stderr
    batch = cli("plan", "--target", "tpu-v5e-8", "--batch-size", "0")
    assert batch.returncode == 2 and "--batch-size 0" in batch.stderr
    model = cli("plan", "--target", "tpu-v5e-8", "--model", str(tmp_path / "missing.py") + ":build")
    assert model.returncode == 2 and "is not a file" in model.stderr
    memory = cli("plan", "--target", "tpu-v5e-8", "--device-memory", "lots")
    assert memory.returncode == 2 and "--device-memory 'lots'" in memory.stderr
    distribution = cli("plan", "--target", "tpu-v5e-8", "--distribution", "pipeline")
    precision = cli("plan", "--target", "tpu-v5e-8", "--precision", "bf16")
    assert precision.returncode == 2 and "--precision: invalid choice: 'bf16'" in precision.stderr
    assert "mixed_bfloat16" in precision.stderr
    assert distribution.returncode == 2 and "fsdp" in distribution.stderr
    for flag in ("--sequence-length", "--lora-rank"):
        zero = cli("plan", "--target", "tpu-v5e-8", flag, "0")
        assert zero.returncode == 2 and f"Received {flag} 0" in zero.stderr and "Traceback" not in zero.stderr


@pytest.mark.slow  # a fresh process importing keras_hub (~10 s); tests/planning/test_models.py checks it in-process
def test_a_language_model_without_its_sequence_length_is_one_line_naming_the_flag(cli):
    result = cli("plan", "--target", "here", "--device-memory", "1GiB", "--model", GEMMA_LORA)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("acceltrain: error:")]
    assert "--sequence-length N" in error and "'token_ids' (None, None)" in error


def test_plan_names_its_python_arguments():
    from acceltrain.planning import plan

    with pytest.raises(UsageError, match="batch_size=0"):
        plan("tpu-v5e-8", batch_size=0)
    with pytest.raises(UsageError, match="distribution='pipeline'"):
        plan("tpu-v5e-8", distribution="pipeline")
    with pytest.raises(UsageError, match=r"Received precision='bf16'\. Valid: auto, float32, mixed_bfloat16\. Pass "
                                         r"'auto' to plan in the precision run and train would use on the target"):
        plan("tpu-v5e-8", precision="bf16")


def test_an_uncompiled_model_is_refused(runtime):
    from acceltrain.planning import plan

    with pytest.raises(UsageError, match="not compiled"):
        plan("here", model=f"{SCRIPTS / 'big_mlp.py'}:uncompiled", batch_size=8, device_memory="1GiB")


@needs_libtpu
@pytest.mark.parametrize("flags, compute, reason", [
    ([], "mixed_bfloat16", "TPUs compute in bfloat16 natively"),  # what run and train would compute in there
    (["--precision", "float32"], "float32", "asked for with precision"),
])
def test_mnist_on_v5e_8_is_data_parallel_and_fits(cli, flags, compute, reason):
    result = cli("plan", "--target", "tpu-v5e-8", "--json", *flags)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert set(plan) == {"target", "devices", "device_memory_bytes", "compiled_for", "candidates", "recommended",
                         "recommended_setting", "levers", "remat_layers", "precision"}
    assert plan["precision"] == {"policy": compute, "reason": reason}
    assert f"dtype policy {compute} ({reason})" in result.stderr  # the decision's one line
    assert plan["recommended_setting"] == {"distribution": "data", "compute": compute, "remat": False,
                                           "accumulation": 1}
    assert [lever["name"] for lever in plan["levers"]] == ["data"]  # the walk stops at the first that fits
    assert (plan["devices"], plan["compiled_for"], plan["recommended"]) == (8, "TPU v5 lite", "data")
    data = plan["candidates"][0]
    assert set(data) == {"distribution", "mesh", "bytes_per_device", "fits", "flops_per_step", "step_seconds_at_peak"}
    assert data["distribution"] == "data" and data["fits"] and 0 < data["bytes_per_device"] < 16 * GIB
    assert "TPU_WORKER_HOSTNAMES" not in result.stderr  # libtpu's start-up chatter is kept out of the way


@needs_libtpu
def test_a_1_4b_mlp_does_not_fit_data_parallel_on_a_16_gib_chip(runtime):
    from acceltrain.planning import plan

    result = plan("tpu-v5e-8", model=BIG_MLP, batch_size=1024, distribution="data")
    data = result.candidates[0]
    assert result.params > 1.3e9
    assert not data.fits and data.bytes_per_device > 16 * GIB  # the compiler's own figure
    # Nothing fits, so the levers, each compiled: the step computes in bfloat16 already (a TPU's precision 'auto',
    # which halves the activations, not Adam's float32 state), so no bfloat16 lever; remat and accumulation shrink
    # only the activations, so none saves this one; more chips (fsdp's shares, an estimate) does.
    assert result.recommended is None and result.precision[0] == "mixed_bfloat16"
    assert [lever.name for lever in result.levers] == ["data", "remat", "accumulate 2", "accumulate 4",
                                                       "accumulate 8", "accumulate 16", "accumulate 32", "more chips"]
    assert not any(lever.fits for lever in result.levers[:-1]) and result.levers[-1].fits


@needs_libtpu
def test_a_1_4b_mlp_fits_sharded_and_its_flops_are_6_params_batch(runtime):
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


GEMMA_2B = SCRIPTS.parent / "presets" / "gemma_2b"


@needs_libtpu
@pytest.mark.slow
def test_gemma_2b_with_lora_fits_v5e_8_and_fully_fine_tuned_needs_fsdp(cli):
    """issue 21's check: a Gemma-2B-shaped keras_hub model (keras_hub's gemma_2b_en config, dict inputs), 512
    tokens, a global batch of 8, on 16 GiB v5e chips, compiled by libtpu here within 10 minutes and 6 GiB
    (each plan a process of its own: its peak resident memory is its children's maximum here)."""
    import resource
    import time

    start = time.monotonic()
    lora = cli("plan", "--target", "tpu-v5e-8", "--model", GEMMA_2B, "--lora-rank", "4", "--sequence-length", "512",
               "--batch-size", "8", "--json", timeout=900)
    assert lora.returncode == 0, lora.stderr
    plan = json.loads(lora.stdout)
    chosen = {c["distribution"]: c for c in plan["candidates"]}[plan["recommended"]]
    assert plan["compiled_for"] == "TPU v5 lite" and chosen["fits"] and chosen["bytes_per_device"] < 16 * GIB
    assert time.monotonic() - start < 600

    start = time.monotonic()
    full = cli("plan", "--target", "tpu-v5e-8", "--model", f"{SCRIPTS / 'gemma_lm.py'}:gemma_2b_full_adamw",
               "--sequence-length", "512", "--batch-size", "8", "--json", timeout=900)
    assert full.returncode == 0, full.stderr
    plan = json.loads(full.stdout)
    by_name = {c["distribution"]: c for c in plan["candidates"]}
    assert not by_name["data"]["fits"] and by_name["data"]["bytes_per_device"] > 16 * GIB  # the compiler refused it
    assert plan["recommended"] in ("fsdp", "model") and by_name[plan["recommended"]]["fits"]
    assert time.monotonic() - start < 600
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 < 6 * GIB


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
    assert result.precision[0] == "float32" and result.candidates and result.recommended_setting.compute == "float32"
    assert result.recommended == "data" and result.candidates[0].fits
    assert math.isnan(result.candidates[0].step_seconds_at_peak or math.nan)  # no published peak for a CPU


@pytest.mark.parametrize("precision, levers", [
    ("float32", ["fsdp", "bfloat16", "remat", "accumulate 2", "more chips"]),
    ("auto", ["fsdp", "remat", "accumulate 2", "more chips"]),  # an H100 computes in bfloat16 already: no such lever
])
def test_when_nothing_fits_the_levers_come_in_order_with_figures(runtime, precision, levers):
    from acceltrain.planning import plan

    result = plan("h100-8", device_memory="256KiB", distribution="fsdp", precision=precision)  # estimated: quick
    assert result.recommended is None and "nothing fits" in result.reason
    # The MNIST recipe's batch of 1200 over 8 devices: 2 accumulation steps leave 75 a device, 4 would not divide.
    assert [lever.name for lever in result.levers] == levers
    assert all(lever.bytes_per_device > 0 for lever in result.levers)
    table = result.table()
    assert "no sharding fits: the levers in order, each estimated" in table and "+ accumulate 2 " in table
    assert "gradient_accumulation_steps=2" in table


def test_a_model_function_that_sets_its_own_policy_is_planned_in_it(runtime):
    """Under `acceltrain run` a script's own keras.config.set_dtype_policy wins over the precision chosen (it is set
    after); plan builds the model function so too, and says so: on an H100 'auto' would compute in bfloat16, the
    function's float32 is what is planned, and no bfloat16 lever is offered (the function would set float32 again)."""
    from acceltrain.planning import OWN_POLICY, plan

    result = plan("h100-8", model=f"{SCRIPTS / 'wide_mlp.py'}:build_in_float32", device_memory="1MiB",
                  distribution="fsdp")
    assert result.precision == ("float32", OWN_POLICY)
    assert result.levers[0].name == "fsdp" and "bfloat16" not in [lever.name for lever in result.levers]
    assert {lever.setting.compute for lever in result.levers if lever.setting} == {"float32"}


def test_a_lever_cannot_change_a_policy_the_model_function_sets_and_says_so(runtime):
    """On this CPU 'auto' is float32, as the function's own: the same policy, so nothing tells them apart until the
    bfloat16 lever's build comes back in float32 again; that lever is reported as not built, not as a figure."""
    from acceltrain.planning import plan

    result = plan("here", model=f"{SCRIPTS / 'wide_mlp.py'}:build_in_float32", batch_size=64, device_memory="1MiB",
                  distribution="data")
    bfloat16 = next(lever for lever in result.levers if lever.name == "bfloat16")
    assert bfloat16.bytes_per_device is None and not bfloat16.fits
    assert bfloat16.how == ("could not compile: UsageError: the model function sets its own dtype policy, float32, so "
                            "the step cannot be built in mixed_bfloat16")


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


@pytest.mark.parametrize("model, distribution, sequence_length", [
    (WIDE_MLP, "data", None), (WIDE_MLP, "fsdp", None),
    (GEMMA_LORA, "fsdp", 32),  # dict inputs, frozen weights cut too, AdamW's slots for the adapters alone
])
def test_here_agrees_with_the_sharding_measure_and_the_real_arrays(model, distribution, sequence_length,
                                                                    monkeypatch, runtime):
    """The plan for the 8 simulated devices of this process against what `acceltrain train` would place there.

    Like with like: the compiler's argument bytes less the input batch and Keras's metric counters are the
    weights and optimizer variables it lays out; the real arrays' first-device shards hold exactly those
    (for the LoRA Gemma: the frozen weights, the adapters, and AdamW's slots for the adapters alone). The
    planner's own figure adds the compiler's temporaries (the gradients, XLA's buffers, the activations), so
    it is at least placement.measure's training state (weights, gradients, slots); for the MLP, whose
    activations are small, at most 1.3 x that: measured 1.25 x for data parallel (temporaries of twice the
    weights: the gradients and one more weight-sized buffer, a quarter of Adam's state) and 1.03 x for fsdp.
    """
    import acceltrain
    from acceltrain.layout import placement
    from acceltrain import user_model
    from acceltrain.planning import plan, step

    compiled = []
    compile_step = step.compile_step
    monkeypatch.setattr(step, "compile_step",
                        lambda *a, **k: compiled.append((a[0], compile_step(*a, **k))) or compiled[-1][1])
    batch_size = 64
    result = plan("here", model=model, batch_size=batch_size, distribution=distribution, device_memory="64MiB",
                  sequence_length=sequence_length)
    (candidate,) = result.candidates
    assert candidate.fits and result.recommended == distribution and result.compiled_for == "cpu"
    (abstract, step_compiled), = compiled

    placed = acceltrain.connect(simulate_devices=8, distribution=distribution, verbose=False)
    build = user_model.builder(model)
    state = placement.measure(placed, build)
    expected_state = state["replicated"] if distribution == "data" else state["by_degree"][8]
    built = placed.build(build)
    with placed.scope():
        built.optimizer.build(built.trainable_variables)  # as fit does: Adam's slots take their weights' layouts
    held = placed.backend_module.first_device_bytes(built.weights + built.optimizer.variables)
    gradients = placed.backend_module.first_device_bytes(built.trainable_weights)

    x, y = abstract.batch_specs(batch_size // 8)  # one device's share of the batch
    batch_bytes = sum(math.prod(spec.shape) * spec.dtype.itemsize for spec in jax_leaves((x, y)))
    counters = sum(math.prod(v.shape) * 4 for v in abstract.model.metrics_variables)  # float32 totals and counts
    # The same weights and slots, to the byte for the MLP; XLA:CPU counts 12 bytes more among the LoRA Gemma's
    # arguments than their arrays (and the abstract variables) hold: measured, data parallel (1.25 MB) and fsdp.
    assert 0 <= step_compiled.argument_bytes - batch_bytes - counters - held <= (0 if model == WIDE_MLP else 16)
    # measure() counts slots from their shapes, leaving out the optimizer's scalar step counter (8 bytes).
    assert held + gradients - expected_state == 8
    assert expected_state <= candidate.bytes_per_device
    if model == WIDE_MLP:
        assert candidate.bytes_per_device <= 1.3 * expected_state


def jax_leaves(tree) -> list:
    import jax

    return jax.tree.leaves(tree)


def test_when_no_sharding_fits_the_levers_are_compiled_here_until_one_fits(runtime):
    """A model whose activations fill the memory (tests/scripts/wide_activations.py), data parallel on the 8
    simulated devices with 16 MiB each: each lever compiled by XLA:CPU, kept where it saves bytes, up to 4
    accumulation steps of 256, which keep the global batch of 1024."""
    from acceltrain.planning import plan

    result = plan("here", model=f"{SCRIPTS / 'wide_activations.py'}:build", batch_size=1024, distribution="data",
                  device_memory="16MiB")
    walk = [(lever.setting.describe(), lever.fits) for lever in result.levers]
    assert walk == [("data", False), ("data + bfloat16", False), ("data + bfloat16 + remat", False),
                    ("data + bfloat16 + remat + accumulate 2", False), ("data + bfloat16 + remat + accumulate 4", True)]
    needs = [lever.bytes_per_device for lever in result.levers]
    assert needs == sorted(needs, reverse=True) and needs[-1] <= 16 * 1024**2 < needs[-2]
    assert result.recommended == "data" and "fit(batch_size=256)" in result.levers[-1].how
    document = result.as_dict()
    assert document["recommended_setting"] == {"distribution": "data", "compute": "mixed_bfloat16", "remat": True,
                                               "accumulation": 4}
    assert [lever["bytes_per_device"] for lever in document["levers"]] == needs
    assert len(document["remat_layers"]) == 5  # its five Dense layers, named as the model names them
    assert "recommended: data + bfloat16 + remat + accumulate 4 (no sharding alone fits" in result.table()


def test_libtpu_variables_are_set_inside_the_compile_and_put_back(monkeypatch):
    import os

    from acceltrain.planning import step

    monkeypatch.delenv("TPU_WORKER_HOSTNAMES", raising=False)
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "0")  # the user's own: kept
    with step.libtpu_environment():
        assert (os.environ["TPU_WORKER_HOSTNAMES"], os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"]) == ("localhost", "0")
    assert "TPU_WORKER_HOSTNAMES" not in os.environ and os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"] == "0"


@needs_libtpu
def test_a_tpu_plan_leaves_no_libtpu_variable_for_a_later_connect(monkeypatch, runtime):
    """On a TPU VM a later connect() in the same process must see the VM's hosts, not the compile's localhost."""
    import os

    from acceltrain.planning import plan, step

    monkeypatch.delenv("TPU_WORKER_HOSTNAMES", raising=False)
    seen = []
    compile_step = step.compile_step
    monkeypatch.setattr(step, "compile_step",
                        lambda *a, **k: seen.append(os.environ.get("TPU_WORKER_HOSTNAMES")) or compile_step(*a, **k))
    result = plan("tpu-v5e-8", distribution="data")
    assert result.compiled_for == "TPU v5 lite" and seen == ["localhost"]
    assert "TPU_WORKER_HOSTNAMES" not in os.environ


@pytest.mark.parametrize("step_seconds, shown", [
    (5.12e-3, "200,000"),  # the big MLP on tpu-v5e-8 takes 5.39 ms: a rate worth reading
    (1e-3, "1,024,000"),  # from the threshold on
    (2.04e-6, "(not shown)"),  # the MNIST MLP on tpu-v5e-8: 2 µs at peak would say 500 million samples/s
    (None, "n/a"),  # no published peak (a CPU)
])
def test_the_table_shows_only_rates_a_step_at_peak_can_vouch_for(step_seconds, shown):
    from acceltrain.planning import Candidate, Plan, format_table

    plan = Plan(target="tpu-v5e-8", devices=8, device_memory_bytes=16 * GIB, compiled_for="TPU v5 lite",
                candidates=[Candidate("data", "batch 8", GIB, True, 1e9, step_seconds)], recommended="data",
                reason="it fits", batch_size=1024, params=1000)
    table = format_table(plan)
    row = table.splitlines()[2]
    assert row.split()[-1] == shown.split()[-1], row
    said = "samples/s (not shown): a step under 1 ms at peak is set by what it costs besides its FLOPs"
    assert (said in table) == (shown == "(not shown)")


def test_a_sequence_length_the_model_has_no_use_for_is_refused_naming_it():
    from acceltrain.planning import plan

    with pytest.raises(UsageError, match=r"Received --sequence-length 512 \(sequence_length=512\), but the model's "
                                         r"inputs \(.*\(None, 784\)\) have no unknown size but the batch's for it to "
                                         r"set, so it would not be used\. Leave it out\."):
        plan("here", device_memory="1GiB", sequence_length=512)
