"""Config files for `acceltrain train`: every option of the command, as TOML.

    acceltrain train --config run.toml --seed 2     # the file's settings; flags override them

run.toml holds the fields of `TrainConfig` at the top level, e.g.

    recipe = "mnist-mlp"
    epochs = 5
    learning_rate = 1e-3

Each run writes the settings it resolved to OUT/config.toml, so `acceltrain train --config
OUT/config.toml` runs the same job again. Relative paths in a file are relative to the file's folder,
so a config keeps working when run from elsewhere.
"""

import dataclasses
import difflib
import json
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
import types
import typing
from dataclasses import dataclass
from pathlib import Path

from acceltrain import recipes
from acceltrain.commands import outputs
from acceltrain.errors import UsageError

PATH_KEYS = ("data", "model", "out")  # resolved against the config file's folder
# About the run's folder, not the job: written as comments, so that rerunning a run's config.toml
# neither overwrites nor resumes the run it came from.
FOLDER_KEYS = ("out", "resume", "overwrite")


@dataclass
class TrainConfig:
    recipe: str = recipes.DEFAULT
    model: str | None = None  # "FILE.py:FUNCTION" returning a Keras model; replaces the recipe's
    data: str | None = None  # an .npz in the keras.datasets layout; default: the bundled MNIST
    epochs: int | None = None  # default: the recipe's
    batch_size: int | None = None  # global batch; default: the recipe's
    learning_rate: float | None = None  # default: the recipe's schedule; a number is constant
    validation_split: float = 0.1  # the last fraction of the training samples, held out to validate on; 0: none
    out: str | None = None  # default: runs/<timestamp>
    backend: str | None = None
    simulate_devices: int | None = None
    distribution: str = "auto"  # auto, data, fsdp, model or none
    device_memory: str | None = None  # bytes per device ("16GiB"): overrides the hardware's; what 'auto' fits to
    seed: int = 0
    platform: str = "auto"  # or tpu, gpu, cpu: an error if there is none
    tpu: str | None = None  # a TPU's name or address (TensorFlow backend)
    precision: str = "auto"  # Keras's dtype policy: auto (bfloat16 compute where native), float32, mixed_bfloat16
    device_data: str = "auto"  # auto: in-memory arrays kept on the devices where they fit; off: Keras's input path
    resume: bool = False  # continue from the newest good checkpoint in `out`
    overwrite: bool = False  # replace what a previous run left in `out`
    checkpoint_every: str = "auto"  # or "N epochs", "N steps"
    keep_checkpoints: int = 2
    tensorboard: bool = False  # Keras's TensorBoard callback, writing to <out>/tensorboard
    stall_timeout: float | None = None  # seconds; default watchdog.DEFAULT_STALL_TIMEOUT, 0: off
    autopilot: bool = True  # when the step does not fit: bfloat16, remat, accumulation in turn (else stop)


def fields() -> dict[str, type]:
    """The options of `acceltrain train` and the type each takes (None allowed where the default is None)."""
    return dict(typing.get_type_hints(TrainConfig))


def resolve(config_file: str | Path | None, flags: dict):
    """The TrainConfig of a run: TrainConfig's defaults, then the file's values, then the flags given."""
    values = load(config_file) if config_file else {}
    values.update(flags)
    return TrainConfig(**values)


def load(path: str | Path) -> dict:
    """The values of a TOML config file, checked against TrainConfig's fields. Raises UsageError."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise UsageError(f"Received --config {str(path)!r}, which cannot be read ({error.strerror}). "
                         "Pass a TOML file, e.g. --config run.toml.") from None
    try:
        values = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"{str(path)!r} is not valid TOML: {error}. Write one `key = value` a line, "
                         'e.g. epochs = 5 or data = "my_data.npz".') from None
    return check(values, source=str(path), base=path.parent)


def check(values: dict, *, source: str, base: Path | None = None) -> dict:
    """`values` with each key known and each value of its field's type; paths made relative to `base`."""
    known = fields()
    checked = {}
    for key, value in values.items():
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise UsageError(f"Unknown key {key!r} in {source}.{hint} Valid keys: {', '.join(known)}.")
        checked[key] = _checked_value(key, value, known[key], source)
        if base is not None and key in PATH_KEYS and checked[key] is not None:
            checked[key] = _relative_to(base, checked[key], key)
    return checked


def _checked_value(key: str, value, annotation, source: str):
    allowed = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    for kind in allowed:
        if kind is type(None):
            continue
        # bool is an int in Python, but `epochs = true` is a mistake, not 1 epoch.
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if kind in (str, bool) and isinstance(value, kind):
            return value
    names = " or ".join(_TYPE_NAMES[kind] for kind in allowed if kind is not type(None))
    raise UsageError(
        f"Received {key} = {_toml_value(value) if _writable(value) else repr(value)} in {source}, "
        f"{_describe(value)}. Expected {names}, e.g. {key} = {_EXAMPLES[_first_kind(allowed)]}."
    )


_TYPE_NAMES = {int: "a whole number", float: "a number", str: "a string", bool: "true or false"}
_EXAMPLES = {int: "3", float: "1e-3", str: '"..."', bool: "true"}


def _first_kind(allowed):
    return next(kind for kind in allowed if kind is not type(None))


def _describe(value) -> str:
    kinds = {bool: "true or false", int: "a whole number", float: "a number", str: "a string",
             dict: "a table", list: "a list"}
    return f"which is {kinds.get(type(value), type(value).__name__)}"


def _writable(value) -> bool:
    return isinstance(value, (bool, int, float, str))


def _relative_to(base: Path, value: str, key: str) -> str:
    if key == "model":  # FILE.py:FUNCTION: only the file part is a path
        file, colon, function = value.rpartition(":")
        return f"{_relative_to(base, file, 'data')}{colon}{function}" if colon else value
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else base / path)


# --- Writing ----------------------------------------------------------------------------------

def dumps(config) -> str:
    """The TOML text of a TrainConfig: its set values, paths absolute, FOLDER_KEYS as comments.

    None values are left out because TOML has no null, and leaving a key out means its default.
    """
    lines = ["# acceltrain train --config THIS_FILE reruns this job; flags given with it override these values."]
    for key, value in dataclasses.asdict(config).items():
        if value is None:
            continue
        if key in PATH_KEYS:
            value = _absolute(key, value)
        line = f"{key} = {_toml_value(value)}"
        lines.append(f"# {line}  (this run's folder; pass --out for the rerun's)" if key in FOLDER_KEYS else line)
    return "\n".join(lines) + "\n"


def write(path: Path, config) -> None:
    with outputs.atomic_path(path) as temporary:
        temporary.write_text(dumps(config))


def _absolute(key: str, value: str) -> str:
    if key == "model":
        file, colon, function = value.rpartition(":")
        return f"{Path(file).resolve()}{colon}{function}" if colon else value
    return str(Path(value).resolve())


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)  # Python's float repr (1e-05, 0.001) is valid TOML
    # A TOML basic string takes JSON's escapes; ensure_ascii keeps control characters escaped.
    return json.dumps(str(value))
