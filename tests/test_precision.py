import pytest

from acceltrain import decisions, precision


@pytest.mark.parametrize(
    "platform, compute_capability, current, expected",
    [
        ("tpu", None, "float32", "mixed_bfloat16"),
        ("gpu", "9.0", "float32", "mixed_bfloat16"),  # H100, H200
        ("gpu", "8.0", "float32", "mixed_bfloat16"),  # A100: the first with native bfloat16
        ("gpu", "7.5", "float32", "float32"),  # T4: float16 only, which needs loss scaling
        ("gpu", None, "float32", "float32"),  # unknown: no bfloat16 assumed
        ("gpu", "garbled", "float32", "float32"),
        ("cpu", None, "float32", "float32"),  # AVX2: no bfloat16 speed
        ("tpu", None, "mixed_float16", "mixed_float16"),  # the user's own policy wins everywhere
        ("cpu", None, "bfloat16", "bfloat16"),
    ],
)
def test_choose_precision(platform, compute_capability, current, expected):
    choice, reason = decisions.choose_precision(platform, compute_capability, current)
    assert choice == expected
    assert reason


def test_precision_scope_sets_the_policy_and_restores_it():
    import keras

    with precision.scope("mixed_bfloat16"):
        layer = keras.layers.Dense(2)
    assert layer.dtype_policy.compute_dtype == "bfloat16"
    assert layer.dtype_policy.variable_dtype == "float32"  # weights and optimizer stay float32
    assert precision.current_policy() == "float32"


def test_precision_scope_restores_the_policy_when_the_body_raises():
    with pytest.raises(RuntimeError), precision.scope("mixed_bfloat16"):
        raise RuntimeError("boom")
    assert precision.current_policy() == "float32"


def test_connect_chooses_float32_on_this_cpu_and_says_why():
    import acceltrain

    runtime = acceltrain.connect(verbose=False)
    assert runtime.precision == "float32"
    assert runtime.decisions["precision"].startswith("float32 (")
    with runtime.scope():
        import keras

        assert keras.layers.Dense(2).dtype_policy.compute_dtype == "float32"
