import re

import pytest

from acceltrain import sharding
from acceltrain.errors import UsageError

MIB = sharding.MIB


@pytest.mark.parametrize(
    "shape, axis_size, expected",
    [
        ((784, 512), 8, 0),  # the largest divisible dim
        ((512, 784), 8, 1),
        ((256, 256), 8, 0),  # equals: the first
        ((10, 512), 8, 1),  # 10 does not divide by 8
        ((512, 10), 8, 0),
        ((3, 5), 8, None),  # nothing divides: replicated
        ((1, 4096), 4, 1),
        ((4, 1, 32), 4, 2),  # 1 key/value head over 4: another axis takes the cut
        ((512,), 8, None),  # vectors are replicated
        ((), 8, None),
        ((784, 512), 1, None),  # one device: nothing to cut
        ((4, 512, 3), 8, 1),
    ],
)
def test_shard_axis(shape, axis_size, expected):
    assert sharding.shard_axis(shape, axis_size) == expected


@pytest.mark.parametrize(
    "shape, axis_size, expected",
    [
        ((784, 512), 8, ("model", None)),
        ((10, 512), 8, (None, "model")),
        ((3, 5), 8, (None, None)),
        ((512,), 8, (None,)),
    ],
)
def test_fsdp_spec(shape, axis_size, expected):
    assert sharding.fsdp_spec(shape, axis_size) == expected


def test_fsdp_spec_names_the_axis():
    assert sharding.fsdp_spec((64, 8), 8, "batch") == ("batch", None)


@pytest.mark.parametrize("shape, axis_size, expected", [((3, 5), 8, True), ((8, 5), 8, False), ((3,), 8, False),
                                                        ((3, 5), 1, False)])
def test_indivisible(shape, axis_size, expected):
    assert sharding.indivisible(shape, axis_size) is expected


def test_state_bytes_counts_weights_gradients_and_slots():
    # A 1024 x 1024 float32 kernel (4 MiB) and its 1024 bias, under Adam (2 slots), over 8 devices.
    weights = [((1024, 1024), "float32"), ((1024,), "float32")]
    state = sharding.state_bytes(weights, optimizer_slots_per_weight=2, axis_size=8)
    kernel, bias = 4 * MIB, 4096
    assert state["params"] == 1024 * 1024 + 1024
    assert state["weights"] == kernel + bias
    assert state["gradients"] == kernel + bias
    assert state["optimizer"] == 2 * (kernel + bias)
    assert state["replicated"] == 4 * (kernel + bias)
    assert state["per_device"] == 4 * kernel // 8 + 4 * bias  # the bias stays whole on every device
    assert state["sharded_weights"] == kernel


def test_state_bytes_by_dtype_and_frozen_weights():
    weights = [((1024, 1024), "bfloat16"), ((1024, 1024), "float32")]
    state = sharding.state_bytes(weights, optimizer_slots_per_weight=2, trainable=[True, False])
    assert state["weights"] == 2 * MIB + 4 * MIB
    assert state["gradients"] == 2 * MIB  # frozen weights have no gradient and no slots
    assert state["optimizer"] == 4 * MIB
    assert state["per_device"] == state["replicated"]  # one device: nothing cut


def test_sharded_bytes_by_degree_lists_the_divisors():
    by_degree = sharding.sharded_bytes_by_degree([((1024, 1024), "float32")], 2, 8)
    assert sorted(by_degree) == [2, 4, 8]
    assert by_degree[8] == 4 * 4 * MIB // 8


@pytest.mark.parametrize(
    "replicated, by_degree, devices, memory, expected",
    [
        (100 * MIB, {2: 50 * MIB, 4: 25 * MIB, 8: 13 * MIB}, 8, 1024 * MIB, ("data", 8)),  # fits
        (100 * MIB, {2: 50 * MIB, 4: 25 * MIB, 8: 13 * MIB}, 8, None, ("data", 8)),  # unknown memory
        (100 * MIB, {2: 50 * MIB, 4: 25 * MIB, 8: 13 * MIB}, 8, 128 * MIB, ("fsdp", 2)),  # 96 MiB usable
        (100 * MIB, {2: 50 * MIB, 4: 25 * MIB, 8: 13 * MIB}, 8, 40 * MIB, ("fsdp", 4)),  # the least that fits
        (100 * MIB, {2: 50 * MIB, 4: 25 * MIB, 8: 13 * MIB}, 8, 20 * MIB, ("fsdp", 8)),
        (100 * MIB, {}, 1, 200 * MIB, ("none", 1)),  # one device, fits
        (100 * MIB, {2: 50 * MIB}, 2, 134 * MIB, ("data", 2)),  # exactly at the headroom line: 100.5 usable
    ],
)
def test_choose_sharding(replicated, by_degree, devices, memory, expected):
    choice, degree, reason = sharding.choose_sharding(replicated, by_degree, devices, memory, headroom=0.25)
    assert (choice, degree) == expected
    assert "MiB" in reason


def test_choose_sharding_reason_has_the_numbers():
    _, _, reason = sharding.choose_sharding(400 * MIB, {8: 50 * MIB}, 8, 128 * MIB, 0.25)
    assert reason == "400.0 MiB to replicate > 96.0 MiB usable per device (128.0 MiB less 25% headroom) → fsdp over 8: 50.0 MiB each"


@pytest.mark.parametrize("devices, by_degree", [(8, {2: 50 * MIB, 4: 25 * MIB, 8: 13 * MIB}), (1, {})])
def test_choose_sharding_stops_when_nothing_fits(devices, by_degree):
    with pytest.raises(UsageError, match=r"does not fit even sharded over \d+ device\(s\): .*needs .* per device, has .*help"):
        sharding.choose_sharding(100 * MIB, by_degree, devices, 10 * MIB, 0.25)


@pytest.mark.parametrize("devices, expected", [(8, 4), (4, 2), (2, 2), (16, 4), (1, 1), (6, 3)])
def test_model_axis_size(devices, expected):
    assert sharding.model_axis_size(devices) == expected


@pytest.mark.parametrize(
    "text, expected",
    [("128MiB", 128 * MIB), ("16GiB", 16 * 1024 * MIB), ("1.5GB", 1_500_000_000), ("4096", 4096),
     ("2 gib", 2 * 1024 * MIB), (1000, 1000)],
)
def test_parse_bytes(text, expected):
    assert sharding.parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "-1GiB", "0", "12 parsecs", "nanGiB", "infMiB"])
def test_parse_bytes_rejects(text):
    with pytest.raises(UsageError, match=r"device_memory=.*Valid: a positive size"):
        sharding.parse_bytes(text)


@pytest.mark.parametrize("nbytes, expected", [(512, "512 B"), (1536, "1.5 KiB"), (403 * MIB, "403.0 MiB"),
                                              (3 * sharding.GIB, "3.0 GiB")])
def test_format_bytes(nbytes, expected):
    assert sharding.format_bytes(nbytes) == expected


def test_format_params():
    assert sharding.format_params(25_200_000) == "25.2M params"


def test_unmatched_layout_keys_names_the_nearest_paths():
    paths = ["sequential/dense/kernel", "sequential/dense/bias", "sequential/dense_1/kernel"]
    missing = sharding.unmatched_layout_keys(
        [".*dense.*kernel", "dense.*kernel", "embedding/embeddings"], paths, lambda k, p: re.fullmatch(k, p)
    )
    assert list(missing) == ["dense.*kernel", "embedding/embeddings"]  # the fullmatch trap, and a plain miss
    assert "sequential/dense/kernel" in missing["dense.*kernel"]


def test_coverage_shares_and_warns_on_big_replicated_weights():
    variables = [("big/kernel", (1024, 1024), "float32", 8), ("odd/kernel", (1000, 999), "float32", 1),
                 ("big/bias", (1024,), "float32", 1)]
    report = sharding.coverage(variables, warn_above=MIB)
    assert report["sharded_bytes"] == 4 * MIB
    assert report["share"] == pytest.approx(4 * MIB / (4 * MIB + 4 * 999_000 + 4096))
    assert report["big_replicated"] == [("odd/kernel", 4 * 999_000)]  # the bias is under the threshold


# A 1024 x 1024 float32 kernel is 4 MiB: 16 MiB of training state with its gradient and Adam's two slots.
@pytest.mark.parametrize("shape, trainable, held, budget, cut, held_after", [
    ((1024, 1024), True, 0, 16 * MIB, False, 16 * MIB),  # fits the budget whole: born whole
    ((1024, 1024), True, 1, 16 * MIB, True, 1 + 2 * MIB),  # one byte over: cut over 8, an eighth held
    ((1024, 1024), False, 12 * MIB, 16 * MIB, False, 16 * MIB),  # frozen: the weight alone, no gradient or slots
    ((1024,), True, 16 * MIB, 16 * MIB, False, 16 * MIB + 16 * 1024),  # a vector is never cut, and is counted
    ((3, 5), True, 16 * MIB, 16 * MIB, False, 16 * MIB + 240),  # nothing divides by 8: whole
    ((1024, 1024), True, 0, 0, True, 2 * MIB),  # no budget at all: every cuttable weight born cut
])
def test_a_variable_is_born_whole_while_the_device_holds_the_budget_and_cut_after(shape, trainable, held, budget,
                                                                                  cut, held_after):
    assert sharding.born_cut(shape, "float32", trainable, held, budget, 8) == (cut, held_after)
