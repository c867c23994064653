"""What a script says about itself before it runs, read from its source (no import, no framework): the Keras
backend it chooses.

    choice = script_source.backend_choice(Path("train.py").read_text())
    choice.backend, choice.forced, choice.line, choice.said   # "tensorflow", True, 5, "os.environ['KERAS_BACKEND'] = 'tensorflow'"

A script often chooses its backend before importing Keras (keras.io's examples begin so). Plainly, that choice
holds; under `acceltrain run`, Keras is loaded before the script runs, so the choice must be seen here, from the
source, to be kept. Three shapes, as Python reads them:
- `os.environ["KERAS_BACKEND"] = NAME`: forced, whatever the environment says;
- `os.environ.setdefault("KERAS_BACKEND", NAME)`: the environment's KERAS_BACKEND wins where it is set;
- `keras.config.set_backend(NAME)`: forced (Keras reloads itself with it).
The first one in the file counts. A value that is not a literal string cannot be read before the script runs:
`backend` is then None.
"""

import ast
from dataclasses import dataclass

VARIABLE = "KERAS_BACKEND"


@dataclass(frozen=True)
class BackendChoice:
    backend: str | None  # the name the script sets; None where it is computed at run time
    forced: bool  # True: it replaces the environment's KERAS_BACKEND; False (setdefault): only where that is unset
    said: str  # how the script says it: "os.environ['KERAS_BACKEND'] = 'tensorflow'"
    line: int = 0  # where

    def over(self, env: str | None) -> str | None:
        """The backend a plain run of the script ends with, given the environment's KERAS_BACKEND (`env`)."""
        if self.backend is None:
            return env
        return self.backend if self.forced or env is None else env


def backend_choice(source: str) -> BackendChoice | None:
    """The first place the script chooses its Keras backend, or None where it does not (or cannot be parsed)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None  # Python will say so when it runs the script
    found = [choice for node in ast.walk(tree) if (choice := _choice(node)) is not None]
    return min(found, key=lambda pair: pair[0])[1] if found else None


def _choice(node) -> tuple[tuple[int, int], BackendChoice] | None:
    where = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
    if isinstance(node, ast.Assign) and any(_is_environ_item(target) for target in node.targets):
        return where, _made("os.environ['KERAS_BACKEND'] = {}", node.value, True, node.lineno)
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    if node.func.attr == "setdefault" and _is_environ(node.func.value) and len(node.args) == 2 \
            and _literal(node.args[0]) == VARIABLE:
        return where, _made("os.environ.setdefault('KERAS_BACKEND', {})", node.args[1], False, node.lineno)
    if node.func.attr == "set_backend" and _dotted(node.func.value).endswith("config") and len(node.args) == 1:
        return where, _made(f"{_dotted(node.func)}({{}})", node.args[0], True, node.lineno)
    return None


def _made(form: str, value, forced: bool, line: int) -> BackendChoice:
    backend = _literal(value)
    shown = repr(backend) if backend is not None else ast.unparse(value)
    return BackendChoice(backend, forced, form.format(shown), line)


def _is_environ_item(target) -> bool:
    return isinstance(target, ast.Subscript) and _is_environ(target.value) and _literal(target.slice) == VARIABLE


def _is_environ(node) -> bool:
    """`os.environ`, or `environ` imported from os."""
    return _dotted(node) in ("os.environ", "environ")


def _dotted(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _literal(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
