"""What plan builds (planning/models.py, planning/step.py): language models with unknown sequence lengths and dict
inputs, keras_hub presets from their config alone, LoRA, and a model function that fails."""

import json
import math
import resource
import shutil

import pytest

from acceltrain.errors import UsageError
from tests.support import SCRIPTS

GEMMA = SCRIPTS / "gemma_lm.py"
GEMMA_2B = SCRIPTS.parent / "presets" / "gemma_2b"
GIB = 1024**3


def lora_params(layers, query_heads, key_value_heads, hidden, head_dim, rank=4) -> int:
    """keras_hub's default LoRA targets, query and value (EinsumDense kernels heads x hidden x head_dim): per
    kernel, A of heads x hidden x rank and B of rank x head_dim."""
    return layers * sum(heads * hidden * rank + rank * head_dim for heads in (query_heads, key_value_heads))


TINY_LORA = lora_params(2, 4, 1, 128, 32)  # 5,632


@pytest.fixture
def tiny_preset(tmp_path):
    """A keras_hub preset folder of one file: the 2B config with the tiny recipe's shapes."""
    from tests.scripts.gemma_lm import TINY

    config = json.loads((GEMMA_2B / "config.json").read_text())
    config["config"].update(TINY)
    folder = tmp_path / "gemma_tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_language_model_gets_its_sequence_length_and_dict_inputs(runtime):
    from acceltrain.planning import models, step

    abstract = step.build_abstract(models.builder(None, f"{GEMMA}:tiny_lora"), sequence_length=24)
    inputs, labels = abstract.batch_specs(4)
    assert {name: (spec.shape, str(spec.dtype)) for name, spec in inputs.items()} == {
        "token_ids": ((4, 24), "int32"), "padding_mask": ((4, 24), "int32")}  # keras_hub's own dict and dtypes
    assert (labels.shape, str(labels.dtype)) == ((4, 24), "int32")  # next tokens, for its sparse loss


def test_without_a_sequence_length_the_error_names_the_flag_and_the_argument(runtime):
    from acceltrain.planning import plan

    with pytest.raises(UsageError, match=r"inputs 'padding_mask' \(None, None\), 'token_ids' \(None, None\): .*"
                                         r"--sequence-length N \(sequence_length=N\)"):
        plan("here", model=f"{GEMMA}:tiny_lora", batch_size=8, device_memory="1GiB")


def test_lora_trains_only_its_adapters(runtime):
    """Frozen weights: no gradients, no optimizer slots; the adapters of rank 4 on query and value are all
    that trains."""
    from acceltrain.planning import models, step

    full = step.build_abstract(models.builder(None, f"{GEMMA}:tiny_full"), sequence_length=8)
    lora = step.build_abstract(models.builder(None, f"{GEMMA}:tiny_full", lora_rank=4), sequence_length=8)
    assert lora.params == TINY_LORA
    assert lora.total_params == full.total_params + lora.params and full.params == full.total_params
    slots = sum(math.prod(v.shape) for v in lora.model.optimizer.variables if len(v.shape) > 0)
    assert slots == 2 * lora.params  # AdamW's two per trainable weight, none for the frozen ones


def test_a_preset_folder_or_its_config_file_is_planned_as_its_causal_lm(tiny_preset, runtime):
    from acceltrain.planning import models, plan, step

    result = plan("here", model=str(tiny_preset), lora_rank=4, sequence_length=16, batch_size=8, device_memory="1GiB",
                  distribution="data")
    assert result.params == TINY_LORA and result.recommended == "data"
    assert "sequence length 16" in result.table() and "(5.6K trainable)" in result.table()
    config = tiny_preset.parent / "gemma_tiny_config.json"  # the config alone, as published beside a preset
    shutil.copy(tiny_preset / "config.json", config)
    by_file = step.build_abstract(models.builder(None, str(config), lora_rank=4), sequence_length=16)
    assert (by_file.params, by_file.total_params) == (result.params, result.total_params)
    assert type(by_file.model).__name__ == "GemmaCausalLM"


@pytest.mark.parametrize("contents, message", [
    (None, "a folder without config.json"),
    ("{not json", "is not a JSON config"),
    ('{"registered_name": "keras>Dense", "class_name": "Dense", "module": "keras.layers", "config": {"units": 2}}',
     "could not build a CausalLM"),
])
def test_a_preset_that_is_not_one_is_a_usage_error(tmp_path, contents, message, runtime):
    from acceltrain.planning import plan

    folder = tmp_path / "preset"
    folder.mkdir()
    if contents is not None:
        (folder / "config.json").write_text(contents)
    with pytest.raises(UsageError, match=message) as raised:
        plan("here", model=str(folder), sequence_length=8, device_memory="1GiB")
    assert "\n" not in str(raised.value)


def test_a_failing_model_function_is_one_line_naming_it_and_keeps_the_users_error(runtime):
    """The library's error names the function and its error in one line; the CLI prints the user's own frames
    above it (tests/test_user_model.py), from the error kept on it."""
    import traceback

    from acceltrain.planning import plan
    from acceltrain.user_model import ModelFunctionFailed

    with pytest.raises(ModelFunctionFailed) as raised:
        plan("here", model=f"{GEMMA}:raises", device_memory="1GiB")
    message = str(raised.value)
    assert message.startswith(f"--model {GEMMA}:raises: raises() raised ValueError: vocabulary_size must be positive")
    assert "\n" not in message
    frames = [frame.name for frame in traceback.extract_tb(raised.value.error.__traceback__)]
    assert frames[-2:] == ["raises", "_helper_that_fails"]


def test_lora_rank_on_a_model_without_a_keras_hub_backbone_is_refused(runtime):
    from acceltrain.planning import plan

    with pytest.raises(UsageError, match=r"--lora-rank 4 \(lora_rank=4\).*no keras_hub backbone"):
        plan("here", model=f"{SCRIPTS / 'wide_mlp.py'}:build", lora_rank=4, device_memory="1GiB")
    with pytest.raises(UsageError, match="lora_rank=0"):
        plan("here", lora_rank=0)


def test_gemma_2b_is_built_from_its_preset_config_with_no_weight_allocated(runtime):
    """2,506,172,416 parameters, keras_hub's published count for gemma_2b_en (gemma_presets.py), from the
    committed config alone: 9.3 GiB of float32 weights that the process never holds (its peak grows < 2 GiB)."""
    from acceltrain.planning import models, step

    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    abstract = step.build_abstract(models.builder(None, str(GEMMA_2B), lora_rank=4), sequence_length=512)
    assert abstract.total_params - abstract.params == 2_506_172_416
    assert abstract.params == lora_params(18, 8, 1, 2048, 256)  # 1,363,968
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 < peak_before + 2 * GIB


@pytest.mark.parametrize("model, repeated", [
    (f"{GEMMA}:tiny_lora", ["GemmaDecoderBlock"] * 2),  # the blocks, not the embedding nor the final norm
    (f"{SCRIPTS / 'wide_activations.py'}:build", ["Dense"] * 5),
    (f"{SCRIPTS / 'big_mlp.py'}:uncompiled", []),  # one layer: nothing repeats
])
def test_remat_takes_the_layers_a_model_repeats(model, repeated, runtime):
    import keras

    from acceltrain.planning import models, step

    path, function = model.rsplit(":", 1)
    built = models.builder(None, model)() if function != "uncompiled" else keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(2)])
    names = step.remat_layers(built)
    found = {layer.name: type(layer).__name__ for inner in (built, getattr(built, "backbone", built))
             for layer in inner.layers}
    assert [found[name] for name in names] == repeated


def test_several_inputs_and_outputs_each_with_its_loss(runtime):
    from acceltrain.planning import models, plan, step

    model = f"{SCRIPTS / 'two_heads.py'}:build"
    abstract = step.build_abstract(models.builder(None, model))
    inputs, labels = abstract.batch_specs(8)
    assert [(spec.shape, str(spec.dtype)) for spec in inputs] == [((8, 16), "float32"), ((8, 4), "int32")]
    assert {name: (spec.shape, str(spec.dtype)) for name, spec in labels.items()} == {
        "score": ((8, 1), "float32"), "label": ((8,), "int32")}  # mse: like the output; sparse: class indices
    result = plan("here", model=model, batch_size=64, distribution="data", device_memory="64MiB")
    assert result.recommended == "data" and result.candidates[0].bytes_per_device > 0
