"""The levers' walk (planning/levers.py) over a fake compile function: the order, what is kept, where it stops."""

import pytest

from acceltrain.planning.levers import Setting, accumulation_steps, choose_levers, first_fit

WAYS = {"data": 8, "fsdp": 8, "model": 2}
BLOCKS = tuple(f"decoder_block_{i}" for i in range(18))


def fake_compiler(needs: dict, bfloat16: float = 1.0, remat: float = 1.0, fails: str = ""):
    """Bytes per device: the sharding's `needs`, times `bfloat16` and `remat` where those are on, an accumulation
    of N steps taking off (N-1)/N of a quarter (the activations); raises for the lever named `fails`."""
    calls = []

    def compile_fn(setting: Setting) -> int:
        calls.append(setting)
        if fails and fails in setting.describe():
            raise RuntimeError(f"Exception encountered when calling {fails}.\n\n\x1b[1m{fails} broke\x1b[0m\n\nmore")
        nbytes = needs[setting.distribution]
        nbytes *= bfloat16 if setting.compute == "mixed_bfloat16" else 1
        nbytes *= remat if setting.remat else 1
        return int(nbytes * (0.75 + 0.25 / setting.accumulation))

    compile_fn.calls = calls
    return compile_fn


@pytest.mark.parametrize("needs, bfloat16, remat, batch, tried, fits", [
    # Data parallel fits: nothing else is compiled.
    ({"data": 90, "fsdp": 50, "model": 60}, 1, 1, 64, ["data"], "data"),
    # The first sharding that fits, in order (fsdp before model even where model needs less).
    ({"data": 200, "fsdp": 90, "model": 80}, 1, 1, 64, ["data", "fsdp"], "fsdp"),
    ({"data": 200, "fsdp": 150, "model": 99}, 1, 1, 64, ["data", "fsdp", "model"], "model"),
    # No sharding fits: bfloat16 on the one that needed least (model here).
    ({"data": 200, "fsdp": 150, "model": 110}, 0.8, 1, 64, ["data", "fsdp", "model", "model + bfloat16"],
     "model + bfloat16"),
    # bfloat16 saves but not enough: kept, remat on top of it.
    ({"data": 200, "fsdp": 130, "model": 140}, 0.9, 0.8, 64,
     ["data", "fsdp", "model", "fsdp + bfloat16", "fsdp + bfloat16 + remat"], "fsdp + bfloat16 + remat"),
    # bfloat16 saves nothing: dropped; remat is tried on the sharding alone; then accumulation on top of remat.
    ({"data": 200, "fsdp": 130, "model": 140}, 1.0, 0.9, 64,
     ["data", "fsdp", "model", "fsdp + bfloat16", "fsdp + remat", "fsdp + remat + accumulate 2",
      "fsdp + remat + accumulate 4"], "fsdp + remat + accumulate 4"),
    # Nothing fits: every accumulation whose batch divides over the devices (64 over 8: 2, 4, 8), then none.
    ({"data": 400, "fsdp": 300, "model": 350}, 1.0, 1.0, 64,
     ["data", "fsdp", "model", "fsdp + bfloat16", "fsdp + remat", "fsdp + accumulate 2", "fsdp + accumulate 4",
      "fsdp + accumulate 8"], None),
    # The batch decides the accumulation steps: 8 over 8 devices leaves none.
    ({"data": 400, "fsdp": 300, "model": 350}, 1.0, 1.0, 8,
     ["data", "fsdp", "model", "fsdp + bfloat16", "fsdp + remat"], None),
])
def test_the_levers_in_order_up_to_the_first_that_fits(needs, bfloat16, remat, batch, tried, fits):
    compile_fn = fake_compiler(needs, bfloat16, remat)
    walk = choose_levers(["data", "fsdp", "model"], 100, compile_fn, global_batch=batch, batch_ways=WAYS,
                         remat_layers=BLOCKS)
    assert [lever.setting.describe() for lever in walk] == tried
    assert compile_fn.calls == [lever.setting for lever in walk]  # each compiled once, nothing more
    found = first_fit(walk)
    assert (found.setting.describe() if found else None) == fits
    assert all(lever.fits == (lever.bytes_per_device <= 100) for lever in walk)
    assert [lever.fits for lever in walk].count(True) == (fits is not None)


def test_a_lever_that_cannot_compile_is_reported_and_the_walk_goes_on():
    compile_fn = fake_compiler({"data": 200, "fsdp": 130}, bfloat16=0.7, remat=0.5, fails="remat")
    walk = choose_levers(["data", "fsdp"], 75, compile_fn, global_batch=64, batch_ways=WAYS, remat_layers=BLOCKS)
    remat = walk[3]
    assert (remat.name, remat.bytes_per_device, remat.fits) == ("remat", None, False)
    assert remat.how == "could not compile: RuntimeError: Exception encountered when calling remat. remat broke"
    assert walk[-1].setting == Setting("fsdp", compute="mixed_bfloat16", accumulation=4) and walk[-1].fits


def test_each_lever_says_how_to_apply_it():
    walk = choose_levers(["data"], 10, fake_compiler({"data": 12}, 1.0, 1.0), global_batch=32, batch_ways=WAYS,
                         remat_layers=BLOCKS)
    assert [lever.name for lever in walk] == ["data", "bfloat16", "remat", "accumulate 2"]
    assert "mixed_bfloat16" in walk[1].how
    assert walk[2].how.startswith("rematerialise decoder_block_0 … decoder_block_17 (18 layers): build the model "
                                  "inside `with keras.RematScope(mode='list_of_layers'")
    assert walk[3].how.startswith("fit(batch_size=16) with the optimizer's gradient_accumulation_steps=2")


def test_a_model_that_repeats_no_layer_has_no_remat_lever():
    walk = choose_levers(["data"], 10, fake_compiler({"data": 12}, 1.0, 1.0), global_batch=32, batch_ways=WAYS)
    assert [lever.name for lever in walk] == ["data", "bfloat16", "accumulate 2"]


@pytest.mark.parametrize("batch, ways, steps", [(64, 8, [2, 4, 8]), (8, 8, []), (1024, 2, [2, 4, 8, 16, 32]),
                                                (24, 4, [2])])
def test_accumulation_keeps_a_batch_that_divides_over_the_devices(batch, ways, steps):
    assert accumulation_steps(batch, ways) == steps


def test_a_model_built_already_walks_the_shardings_then_accumulation_only():
    """The autopilot at a script's first fit: bfloat16 and remat need the model built again, so the walk leaves them
    out (bfloat16=False, no remat layers) and goes from the shardings to accumulation."""
    compile_fn = fake_compiler({"data": 200, "fsdp": 120, "model": 140})
    walk = choose_levers(["data", "fsdp", "model"], 100, compile_fn, global_batch=64, batch_ways=WAYS, bfloat16=False)
    assert [lever.setting.describe() for lever in walk] == ["data", "fsdp", "model", "fsdp + accumulate 2",
                                                             "fsdp + accumulate 4"]
    assert first_fit(walk).setting == Setting("fsdp", accumulation=4)


@pytest.mark.parametrize("compute, tried", [
    ("float32", ["fsdp", "fsdp + bfloat16", "fsdp + remat", "fsdp + remat + accumulate 2"]),
    # A step that computes in bfloat16 already (precision 'auto' on a TPU, or a GPU of compute capability 8.0+):
    # every setting starts there, and there is no bfloat16 lever to try.
    ("mixed_bfloat16", ["fsdp + bfloat16", "fsdp + bfloat16 + remat", "fsdp + bfloat16 + remat + accumulate 2"]),
])
def test_every_setting_starts_from_the_compute_the_job_runs_in(compute, tried):
    compile_fn = fake_compiler({"fsdp": 130}, bfloat16=1.0, remat=0.9)
    walk = choose_levers(["fsdp"], 100, compile_fn, global_batch=16, batch_ways=WAYS, compute=compute,
                         remat_layers=BLOCKS)
    assert [lever.setting.describe() for lever in walk] == tried
    assert {lever.setting.compute for lever in walk if lever.name != "bfloat16"} == {compute}
