"""Import invariants: acceltrain, its CLI and its config code start no framework (a `--help` or a config
check stays instant; Keras's backend is chosen by connect(), or as Keras itself is first imported)."""

import pytest

from tests import support

FRAMEWORKS = ("jax", "tensorflow", "keras")


@pytest.mark.parametrize("module", ["acceltrain", "acceltrain.cli", "acceltrain.commands.config", "acceltrain.inputs"])
def test_importing_loads_no_framework(module):
    code = (f"import sys, {module}\n"
            f"print(sorted(name for name in {FRAMEWORKS!r} if name in sys.modules))")
    done = support.python("-c", code, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"importing {module} loaded {done.stdout.strip()}"


# --- The layers: each module imports only from its own layer and those below, and nothing imports in a circle

ACCELTRAIN = support.REPO / "src" / "acceltrain"

# Top first. A module belongs to the first layer one of whose names is it or a package above it; any other
# module is the neutral core (errors, log, data, inputs, decisions, hardware, sharding, recipes ...).
LAYERS = (
    ("the CLI and the public names", ("acceltrain", "acceltrain.__main__", "acceltrain.cli")),
    ("commands", ("acceltrain.commands",)),
    ("the library", ("acceltrain.runtime", "acceltrain.assembly", "acceltrain.layout", "acceltrain.training",
                     "acceltrain.planning")),
    ("backends", ("acceltrain.backends",)),
    ("the neutral core", ()),
)


def _import_graph() -> dict[str, set[str]]:
    """{module: the acceltrain modules it imports}, at module level and inside functions alike."""
    import ast

    modules = {}
    for path in ACCELTRAIN.rglob("*.py"):
        parts = path.relative_to(ACCELTRAIN.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def known(name):  # "acceltrain.inputs.arrays.take" → "acceltrain.inputs.arrays"
        while name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for name, path in modules.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {known(alias.name) for alias in node.names if alias.name.startswith("acceltrain")}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("acceltrain"):
                imported |= {known(f"{node.module}.{alias.name}") for alias in node.names}
        graph[name] = imported - {name}
    return graph


def _layer(module: str) -> int:
    for index, (_, names) in enumerate(LAYERS):
        if any(module == name or (name != "acceltrain" and module.startswith(name + ".")) for name in names):
            return index
    return len(LAYERS) - 1


def test_no_module_imports_from_a_layer_above_its_own():
    upward = [f"{module} ({LAYERS[_layer(module)][0]}) imports {imported} ({LAYERS[_layer(imported)][0]})"
              for module, imports in sorted(_import_graph().items()) for imported in sorted(imports)
              if _layer(imported) < _layer(module)]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_no_modules_import_each_other_in_a_circle():
    graph, circles, done = _import_graph(), [], set()

    def visit(module, path):
        if module in path:
            circles.append(" -> ".join(path[path.index(module):] + [module]))
            return
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert not circles, "circular imports:\n" + "\n".join(circles)


def test_the_layer_test_sees_an_upward_import_and_a_circle(monkeypatch):
    """The two tests above, against a graph with one of each: they name the offending import."""
    import sys

    here = sys.modules[__name__]
    monkeypatch.setattr(here, "_import_graph", lambda: {"acceltrain.data": {"acceltrain.runtime"},
                                                        "acceltrain.runtime": {"acceltrain.data"}})
    with pytest.raises(AssertionError, match=r"acceltrain\.data \(the neutral core\) imports acceltrain\.runtime"):
        test_no_module_imports_from_a_layer_above_its_own()
    with pytest.raises(AssertionError, match=r"acceltrain\.data -> acceltrain\.runtime -> acceltrain\.data"):
        test_no_modules_import_each_other_in_a_circle()


def _package_graph() -> dict[str, set[str]]:
    """_import_graph at the granularity of the structure drawing: acceltrain's top-level modules and packages."""
    def top(module):
        return ".".join(module.split(".")[:2])

    graph = {}
    for module, imports in _import_graph().items():
        graph.setdefault(top(module), set()).update(top(name) for name in imports if top(name) != top(module))
    return graph


def test_training_and_planning_stand_side_by_side_under_layout():
    """Issue 42: training/assembly.py's imports stacked training/ over layout/ over placement over planning/. The
    assembly now sits beside the runtime, placement inside layout/: layout/ stands on planning/, and training/ and
    planning/ import nothing of each other nor of what stands above them."""
    graph = _package_graph()
    above = {"acceltrain.assembly", "acceltrain.layout", "acceltrain.runtime"}
    assert not graph["acceltrain.training"] & (above | {"acceltrain.planning"}), graph["acceltrain.training"]
    assert not graph["acceltrain.planning"] & (above | {"acceltrain.training"}), graph["acceltrain.planning"]


def _longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest path of imports down the (circle-free) graph: its floors, top first."""
    chains = {}

    def chain(module):
        if module not in chains:
            chains[module] = [module] + max((chain(name) for name in graph.get(module, ())), key=len, default=[])
        return chains[module]

    return max((chain(module) for module in graph), key=len)


def test_the_structure_stands_on_11_floors():
    """Issue 42: the structure drawing had 13 floors, two of them for one import each (training/assembly.py's over
    layout/ and placement; backends/ climbing to watchdog.py, over cluster.py, for one constant). The longest chain of
    imports between top-level modules and packages is 11 long; one more names its chain here."""
    chain = _longest_chain(_package_graph())
    assert len(chain) <= 11, f"{len(chain)} floors: " + " -> ".join(chain)


def _imports_at_module_level(path) -> set[str]:
    import ast

    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("framework, allowed", [("jax", ("backends",)), ("tensorflow", ("backends",)),
                                                ("keras", ("backends", "training"))])
def test_frameworks_are_imported_at_module_level_only_where_developers_md_says(framework, allowed):
    """DEVELOPERS.md: jax and tensorflow at module level only in backends/; keras also in training/, which is
    imported only after connect() has chosen Keras's backend."""
    offenders = sorted(str(path.relative_to(ACCELTRAIN)) for path in ACCELTRAIN.rglob("*.py")
                       if framework in _imports_at_module_level(path)
                       and path.relative_to(ACCELTRAIN).parts[0] not in allowed)
    assert not offenders, f"{framework} imported at module level outside {allowed}: {offenders}"


# --- Size: a module a reader can hold (issue 36: backends/jax.py had grown to 1018 lines, commands/run.py to 710)

MAX_LINES = 700


def _longer_than(bound: int) -> list[str]:
    return sorted(f"{path.relative_to(ACCELTRAIN)}: {lines} lines" for path in ACCELTRAIN.rglob("*.py")
                  if (lines := len(path.read_text().splitlines())) > bound)


def test_no_module_in_src_is_over_700_lines():
    """Past the bound, split the module by concern (as backends/jax/ is) rather than raise the bound."""
    assert not _longer_than(MAX_LINES), f"modules over {MAX_LINES} lines: {_longer_than(MAX_LINES)}"


def test_the_size_check_sees_a_long_module():
    """The check itself, against a bound every package's __init__ with code passes: it names the file and its length."""
    assert any(found.startswith("runtime.py: ") for found in _longer_than(100))


@pytest.mark.parametrize("module, name", [("acceltrain.runtime", "connect"), ("acceltrain.commands.run", "run_script"),
                                          ("acceltrain.commands.launch", "launch")])
def test_the_entry_points_take_at_most_10_parameters(module, name):
    """Issue 36: rarer options travel in small frozen dataclasses (cluster.Cluster, runtime.Settings,
    acceltrain.Checkpoints), as Accelerate and Keras group theirs, not in long flat signatures."""
    import importlib
    import inspect

    parameters = inspect.signature(getattr(importlib.import_module(module), name)).parameters
    assert len(parameters) <= 10, f"{module}.{name} takes {len(parameters)} parameters: {list(parameters)}"
