"""DEVELOPERS.md's code map and its named functions match the code: a module added, moved or removed, or a
function renamed, fails here by name until the map follows (issue 36: the map had drifted)."""

import ast
import re

import pytest

from tests import support

DEVELOPERS = support.REPO / "DEVELOPERS.md"
SOURCE = support.REPO / "src" / "acceltrain"
ENTRY = re.compile(r"^(?P<indent> *)(?P<names>[\w.-]+(?:/[\w.-]+)*(?:/|\.py)(?:, [\w.-]+\.py)*)(?:\s|$)")
PLACEHOLDER = "tests/file.py"  # the manual's section shows the form `tests/file.py::name`
NAMED = re.compile(r"`(?P<path>[\w/]+\.py)::(?P<name>[\w.]+)`")


def _code_map() -> str:
    """The fenced block under '## The shape'."""
    text = DEVELOPERS.read_text()
    shape = text[text.index("## The shape"):]
    return shape.split("```")[1]


def _mapped_paths() -> set[str]:
    """Every file and folder the map names, as a path from the repository root."""
    paths, parents = set(), []  # parents: [(indent, folder)]
    for line in _code_map().splitlines():
        match = ENTRY.match(line)
        if not match or len(match["indent"]) > 8:  # deeper lines are descriptions carried over
            continue
        indent = len(match["indent"])
        while parents and parents[-1][0] >= indent:
            parents.pop()
        folder = parents[-1][1] if parents else ""
        for name in match["names"].split(", "):
            path = folder + name
            paths.add(path.rstrip("/"))
            if name.endswith("/"):
                parents.append((indent, path))
    return paths


def _source_modules() -> set[str]:
    return {str(path.relative_to(support.REPO)) for path in SOURCE.rglob("*.py")}


def test_every_module_in_the_map_exists():
    missing = sorted(path for path in _mapped_paths() if not (support.REPO / path).exists())
    assert not missing, f"DEVELOPERS.md's code map names files that do not exist: {missing}"


def test_every_source_module_is_in_the_map():
    mapped = _mapped_paths()
    # A package's __init__.py is described on its folder's line.
    unmapped = sorted(path for path in _source_modules()
                      if path not in mapped and not (path.endswith("/__init__.py") and path.rpartition("/")[0] in mapped))
    assert not unmapped, f"modules missing from DEVELOPERS.md's code map: {unmapped}"


def _defined_names(path) -> set[str]:
    """Top-level names and Class.member names a file defines."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                names |= {f"{node.name}.{member.name}" for member in node.body
                          if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef))}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {target.id for target in targets if isinstance(target, ast.Name)}
    return names


def _named_functions():
    for match in NAMED.finditer(DEVELOPERS.read_text()):
        if match["path"] != PLACEHOLDER:
            yield match["path"], match["name"]


@pytest.mark.parametrize("path, name", sorted(set(_named_functions())))
def test_each_named_function_exists(path, name):
    file = SOURCE / path if (SOURCE / path).exists() else support.REPO / path
    assert file.exists(), f"DEVELOPERS.md names {path}::{name}, but {path} does not exist"
    assert name in _defined_names(file), f"DEVELOPERS.md names {path}::{name}, which {path} does not define"


DOTTED = re.compile(r"`(?P<module>[a-z_]+)\.(?P<name>[A-Za-z_]+)(?:\(\))?`")


def _dotted_references():
    """`module.name` where module is an acceltrain module's own name (decisions, keras_internals, runtime ...),
    or `Runtime.name`; Keras's own (`model.fit`, `keras.src`) are not ours to check."""
    files = {}
    for path in SOURCE.rglob("*.py"):
        files.setdefault(path.stem, []).append(path)
    for match in DOTTED.finditer(DEVELOPERS.read_text()):
        module, name = match["module"], match["name"]
        if module in files and len(files[module]) == 1 and name != "py":  # `inputs.py` is a file
            yield str(files[module][0].relative_to(SOURCE)), name


@pytest.mark.parametrize("path, name", sorted(set(_dotted_references())))
def test_each_dotted_reference_exists(path, name):
    assert name in _defined_names(SOURCE / path), f"DEVELOPERS.md names {path} .{name}, which it does not define"


@pytest.mark.parametrize("name", sorted(set(re.findall(r"`Runtime\.(\w+)", DEVELOPERS.read_text()))))
def test_each_runtime_method_named_exists(name):
    assert f"Runtime.{name}" in _defined_names(SOURCE / "runtime.py"), f"DEVELOPERS.md names Runtime.{name}"


def test_the_map_reads_the_folders_it_claims():
    """The parser itself: a nested entry gets its folder, a comma list each file (a check that can fail)."""
    paths = _mapped_paths()
    assert {"src/acceltrain/hardware/tpu.py", "src/acceltrain/backends/jax/steps.py", "docs/runnable.py"} <= paths
