"""The user's code acceltrain calls: a model function `FILE.py:FUNCTION` (`train --model`, `plan --model`,
acceltrain.plan(model=...)); and, when user code raises, its traceback from the user's own frames (print_traceback:
a run script's, and a model function's, which stops with ModelFunctionFailed, exit 2). Keras is imported only
when the model is loaded.
"""

import importlib.util
import sys
import traceback
from pathlib import Path

from acceltrain.errors import UsageError


class ModelFunctionFailed(UsageError):
    """FILE.py:FUNCTION raised `error` (kept apart from __cause__, which JAX replaces when it passes eval_shape)."""

    def __init__(self, message: str, path: Path, error: Exception):
        super().__init__(message)
        self.path, self.error = path, error


def builder(spec: str):
    """A function of no arguments returning the keras.Model that FILE.py:FUNCTION() returns; `spec` checked now."""
    file, _, function = spec.rpartition(":")
    if not file or not function.isidentifier():
        raise UsageError(f"Received --model {spec!r}. Expected FILE.py:FUNCTION, e.g. --model models.py:build.")
    if not Path(file).is_file():
        raise UsageError(f"Received --model {spec!r}, but {file!r} is not a file. Pass the path of a .py file.")
    return lambda: load(Path(file), function)


def load(path: Path, function_name: str):
    """Import the file and call FUNCTION() for a keras.Model. The file's own errors name the file."""
    import keras

    module_spec = importlib.util.spec_from_file_location(f"acceltrain_user_model_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as error:
        raise UsageError(f"Importing the model file {str(path)!r} failed: {type(error).__name__}: {error}") from error
    function = getattr(module, function_name, None)
    if not callable(function):
        found = sorted(name for name, value in vars(module).items() if callable(value) and not name.startswith("_"))
        raise UsageError(f"{str(path)!r} has no function {function_name!r}. Functions there: "
                         f"{', '.join(found) or 'none'}. Pass --model {path}:NAME.")
    try:
        model = function()
    except Exception as error:
        raise ModelFunctionFailed(f"--model {path}:{function_name}: {function_name}() raised {type(error).__name__}: "
                                  f"{error} (its traceback is above). Fix the function so it returns a keras.Model.",
                                  path, error) from error
    if not isinstance(model, keras.Model):
        raise UsageError(f"{path}:{function_name}() returned {type(model).__name__}, not a Keras model. "
                         "Return a keras.Model (Sequential, functional or subclassed).")
    return model


# --- The user's traceback -----------------------------------------------------------------------

def print_traceback(error: BaseException, file: Path) -> None:
    """The traceback as a plain run of the user's code prints it: from the first frame in `file` on, without the
    frames before it (runpy's, acceltrain's) or acceltrain's between (the interception around Keras's fit)."""
    tb = error.__traceback__
    target = str(Path(file).resolve())
    while tb is not None and str(Path(tb.tb_frame.f_code.co_filename).resolve()) != target:
        tb = tb.tb_next
    shown = traceback.TracebackException(type(error), error, tb or error.__traceback__)
    package = Path(__file__).resolve().parent  # by module path: a checkout may be named acceltrain too
    for exception in _chain(shown):
        exception.stack = traceback.StackSummary.from_list(
            [frame for frame in exception.stack if not Path(frame.filename).resolve().is_relative_to(package)])
    print("".join(shown.format()), end="", file=sys.stderr)


def _chain(exception: traceback.TracebackException):
    """The exception and those it was raised from or while handling."""
    seen = []
    while exception is not None and exception not in seen:
        seen.append(exception)
        exception = exception.__cause__ or exception.__context__
    return seen
