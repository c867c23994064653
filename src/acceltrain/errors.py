"""The errors acceltrain raises on purpose. The CLI maps each to an exit code and prints no traceback."""

import contextlib
import contextvars
import numbers

# While a CLI verb runs (cli.py enters cli_names()), acceltrain's options are named as the flags the user typed
# (--checkpoint-every), else as the Python arguments (checkpoint_every): one context, never a flag passed down.
_UNDER_CLI = contextvars.ContextVar("acceltrain_under_cli", default=False)


class AcceltrainError(Exception):
    """Something went wrong that is not a bug in acceltrain: the message says what and what to do."""

    exit_code = 1

    def _render_traceback_(self) -> list[str]:
        """What IPython (a Jupyter or Colab cell) shows for it: the error and its message, as the CLI prints it,
        not acceltrain's frames (the cell that raised it is the user's line; %tb still shows the whole)."""
        return [f"{type(self).__name__}: {self}"]


class UsageError(AcceltrainError, ValueError):
    """A value the user gave is wrong: the message names it, says what is valid and how to fix it."""

    exit_code = 2


class TrainingDiverged(AcceltrainError):
    """Training stopped learning (NaN loss, or a loss stuck at chance level)."""

    exit_code = 1


@contextlib.contextmanager
def cli_names():
    """The CLI's face: inside, errors and notes name acceltrain's options as the command's flags."""
    token = _UNDER_CLI.set(True)
    try:
        yield
    finally:
        _UNDER_CLI.reset(token)


def under_cli() -> bool:
    """Whether a CLI verb runs now (cli_names()): messages name flags, not Python arguments."""
    return _UNDER_CLI.get()


def option(argument: str) -> str:
    """How the user set one of acceltrain's own options: its flag under the CLI (checkpoint_every →
    --checkpoint-every), else the Python argument. Only for options both faces have: a script's own Keras arguments
    (batch_size of its model.fit) are named as they are."""
    return "--" + argument.replace("_", "-") if under_cli() else argument


def shown(name: str, value) -> str:
    """`name` with `value` as the user wrote it: `--flag 'value'` for a flag, `argument='value'` for an argument."""
    return f"{name} {value!r}" if name.startswith("--") else f"{name}={value!r}"


def positive_int(value, name: str, hint: str = "") -> int:
    """`value` if it is a whole number of at least 1 (not a bool), else a UsageError naming it as the user
    wrote it: a Python argument as `name=value` ("batch_size"), a CLI flag as `--flag value` ("--epochs")."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise UsageError(f"Received {shown(name, value)}. Expected a whole number of at least 1 (a positive integer){hint}.")
    return int(value)
