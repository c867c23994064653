"""What `acceltrain plan` builds: a recipe, a user's FILE.py:FUNCTION, or a keras_hub preset from its config
alone (a preset folder, or its config.json: no weights are read), with LoRA if asked.

Each is returned as a function that builds the compiled keras.Model; the planner calls it under
jax.eval_shape, so even a preset of billions of parameters allocates none of them.
"""

import json
import shutil
import tempfile
from pathlib import Path

from acceltrain.errors import UsageError


def builder(job, model_spec: str | None, lora_rank: int | None = None):
    """The build function for `model_spec` (None: the recipe `job`'s), with LoRA of `lora_rank` enabled."""
    if model_spec is None:
        build = job.build_model
    elif is_preset(model_spec):
        build = _preset(Path(model_spec))
    else:
        build = _user_function(model_spec)
    return build if lora_rank is None else _with_lora(build, lora_rank)


def is_preset(model_spec: str) -> bool:
    """A keras_hub preset folder, or a preset's config file (.json), rather than FILE.py:FUNCTION."""
    return Path(model_spec).is_dir() or model_spec.endswith(".json")


# --- FILE.py:FUNCTION -------------------------------------------------------------------------

def _user_function(model_spec: str):
    """The user's model function, loaded as `acceltrain train --model` loads it (user_model): a function that
    raises stops with its own frames and one line naming it."""
    from acceltrain import user_model

    return user_model.builder(model_spec)


# --- keras_hub presets --------------------------------------------------------------------------

def _preset(path: Path):
    """A keras_hub preset's CausalLM, from its config.json alone, with no preprocessor (plan feeds token ids) and
    the task's default compile (keras_hub's: Adam, sparse cross-entropy on the logits)."""
    config = path / "config.json" if path.is_dir() else path
    if not config.is_file():
        found = "a folder without config.json" if path.is_dir() else "no such file"
        raise UsageError(f"Received --model {str(path)!r}: {found}. "
                         "Pass a keras_hub preset folder (with its config.json), a preset's config .json file, or "
                         "FILE.py:FUNCTION.")
    try:
        json.loads(config.read_text())
    except (OSError, ValueError) as error:
        raise UsageError(f"Received --model {str(path)!r}: {config} is not a JSON config ({error}).") from None

    def build():
        try:
            import keras_hub
        except ImportError:
            raise UsageError(f"Received --model {str(path)!r}, a keras_hub preset, but keras_hub is not installed. "
                             "pip install keras-hub, or pass FILE.py:FUNCTION.") from None
        with tempfile.TemporaryDirectory(prefix="acceltrain-preset-") as folder:
            shutil.copy(config, Path(folder) / "config.json")  # a lone config file is a preset folder of one file
            try:
                return keras_hub.models.CausalLM.from_preset(folder, load_weights=False, preprocessor=None)
            except Exception as error:
                message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                raise UsageError(f"Received --model {str(path)!r}: keras_hub could not build a CausalLM from "
                                 f"{config.name}: {message}. plan builds a preset as its causal LM; for another task, "
                                 "pass FILE.py:FUNCTION returning the compiled model.") from None

    return build


# --- LoRA ------------------------------------------------------------------------------------------

def _with_lora(build, rank: int):
    """`build`, then keras_hub's `backbone.enable_lora(rank)`: the backbone's weights frozen (no gradients, no
    optimizer slots), low-rank adapters on its attention's query and value projections trained."""

    def build_with_lora():
        model = build()
        backbone = getattr(model, "backbone", model)
        if not callable(getattr(backbone, "enable_lora", None)):
            raise UsageError(f"Received --lora-rank {rank} (lora_rank={rank}), but the model, a "
                             f"{type(model).__name__}, has no keras_hub backbone with enable_lora(rank). Enable "
                             "LoRA in the model function instead, or leave --lora-rank out.")
        backbone.enable_lora(rank)
        return model

    return build_with_lora
