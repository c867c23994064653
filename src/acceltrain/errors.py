"""The errors acceltrain raises on purpose. The CLI maps each to an exit code and prints no traceback."""

import numbers


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


def positive_int(value, name: str, hint: str = "") -> int:
    """`value` if it is a whole number of at least 1 (not a bool), else a UsageError naming it as the user
    wrote it: a Python argument as `name=value` ("batch_size"), a CLI flag as `--flag value` ("--epochs")."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        shown = f"{name} {value!r}" if name.startswith("--") else f"{name}={value!r}"
        raise UsageError(f"Received {shown}. Expected a whole number of at least 1 (a positive integer){hint}.")
    return int(value)
