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

    with acceltrain.connect(verbose=False) as runtime:  # closed: its hooks on Keras's fit come off
        assert runtime.precision == "float32"
        assert runtime.decisions["precision"].startswith("float32 (")
        with runtime.scope():
            import keras

            assert keras.layers.Dense(2).dtype_policy.compute_dtype == "float32"


@pytest.mark.parametrize("asked, current, platform, compute_capability, expected", [
    ("float32", "float32", "tpu", None, "float32"),  # how to keep float32 where auto would choose bfloat16
    ("float32", "mixed_float16", "gpu", "9.0", "float32"),  # asked for beats a global policy too
    ("mixed_bfloat16", "float32", "cpu", None, "mixed_bfloat16"),
    ("auto", "float32", "gpu", "8.0", "mixed_bfloat16"),
])
def test_a_precision_asked_for_wins(asked, current, platform, compute_capability, expected):
    assert decisions.choose_precision(platform, compute_capability, current, asked)[0] == expected


@pytest.mark.parametrize("chosen, current, says", [
    ("mixed_bfloat16", "float32", "models built in scope() (every model of a `run` script) compute in bfloat16, not "
                                  "float32 (mixed_bfloat16: why); keep float32 with precision='float32' (CLI: "
                                  "--precision float32)"),
    ("float32", "float32", None),  # nothing changed: nothing said
    ("mixed_float16", "mixed_float16", None),  # the user's own policy, kept
])
def test_the_banner_says_when_the_precision_is_changed_and_how_to_keep_float32(chosen, current, says):
    assert precision.override_note(chosen, "why", current) == says


@pytest.mark.parametrize("platform, kind, compute_capability, precision_flag, why", [
    ("gpu", "NVIDIA A100-SXM4-40GB", "8.0", "auto", "compute capability 8.0 runs bfloat16 on its tensor cores"),
    ("tpu", "TPU v4", None, "auto", "TPUs compute in bfloat16 natively"),
    ("gpu", "Tesla T4", "7.5", "auto", None),  # float32: nothing changed, nothing said
    ("tpu", "TPU v4", None, "float32", None),  # kept as asked
])
def test_connect_on_a_gpu_or_tpu_says_it_computes_in_bfloat16(monkeypatch, runtime, platform, kind, compute_capability,
                                                             precision_flag, why):
    """The accelerator faked where connect() asks the JAX backend about devices (this machine has none)."""
    import acceltrain
    from acceltrain import log
    from acceltrain.backends import jax as jax_backend

    monkeypatch.setattr(jax_backend, "device_counts", lambda: {"tpu": 0, "gpu": 0, "cpu": 8, platform: 1})
    monkeypatch.setattr(jax_backend, "devices", lambda platform: (f"{platform}:0",))
    monkeypatch.setattr(jax_backend, "device_kind", lambda platform: kind)
    monkeypatch.setattr(jax_backend, "compute_capability", lambda platform: compute_capability)
    lines = []
    monkeypatch.setattr(log, "info", lines.append)
    with acceltrain.connect("jax", distribution="none", precision=precision_flag) as connected:
        pass
    [banner] = [line for line in lines if "→" in line]
    assert banner.startswith(f"jax on {platform}: 1 × {kind}")
    note = (f"compute in bfloat16, not float32 (mixed_bfloat16: {why}); keep float32 with precision='float32' (CLI: "
            "--precision float32)")
    assert (note in banner) == (why is not None), banner
    assert connected.precision == ("mixed_bfloat16" if why else "float32")


def test_an_unknown_precision_is_refused_naming_the_valid_ones():
    import acceltrain
    from acceltrain.errors import UsageError

    with pytest.raises(UsageError, match=r"Received precision='bf16'. Valid: auto, float32, mixed_bfloat16"):
        acceltrain.connect(precision="bf16", verbose=False)
