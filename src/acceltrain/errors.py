"""The errors acceltrain raises on purpose. The CLI maps each to an exit code and prints no traceback."""


class AcceltrainError(Exception):
    """Something went wrong that is not a bug in acceltrain: the message says what and what to do."""

    exit_code = 1


class UsageError(AcceltrainError, ValueError):
    """A value the user gave is wrong: the message names it, says what is valid and how to fix it."""

    exit_code = 2


class TrainingDiverged(AcceltrainError):
    """Training stopped learning (NaN loss, or a loss stuck at chance level)."""

    exit_code = 1
