"""What the manual and README.md say about the project is checked against the project: every test the
validation page names exists (and is marked slow where the page says so), every benchmark section it
names is one, README's support matrix is the validation page's, README's test command is the one
.ci/run runs, every `acceltrain ...` command shown parses with today's parser, and the figures were drawn
from the records they show. All by reading files (ast, argparse): no test is run, nothing is built."""

import ast
import contextlib
import io
import json
import re
import shlex
from functools import cache
from pathlib import Path

from acceltrain import cli
from benchmarks.sections import BY_NAME
from docs import cli_reference, make_figures, runnable
from tests.support import REPO

TEST_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`(?P<slow> \((?:partly )?slow\))?")
SECTION_REFERENCE = re.compile(r"benchmark sections? ((?:`[\w-]+`(?:, | and )?)+)")
VALIDATION = REPO / "docs" / "validation.md"


@cache
def functions_in(path: str) -> dict[str, ast.FunctionDef]:
    """The test functions of a test file, by name (module level and in classes)."""
    tree = ast.parse((REPO / path).read_text())
    return {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}


def is_slow(function: ast.FunctionDef) -> bool:
    """Every case of the test is slow: the function itself is marked."""
    return any(ast.unparse(decorator) == "pytest.mark.slow" for decorator in function.decorator_list)


def references(text: str) -> list[re.Match]:
    return list(TEST_REFERENCE.finditer(text))


def test_every_test_the_pages_name_exists_and_is_marked_slow_where_they_say():
    named = 0
    for page in runnable.documents():
        for found in references(page.read_text()):
            path, name, said = found[1], found[2], found["slow"]
            assert (REPO / path).exists(), f"{page.name} names {path}, which does not exist"
            assert name in functions_in(path), f"{page.name} names {path}::{name}, which {path} does not define"
            slow = is_slow(functions_in(path)[name])
            if said == " (slow)":
                assert slow, f"{page.name} says {path}::{name} is slow, but it is not marked slow"
            elif said == " (partly slow)":
                assert not slow and "pytest.mark.slow" in (REPO / path).read_text(), \
                    f"{page.name} says some cases of {path}::{name} are slow, but none is"
            else:
                assert not slow, f"{page.name} names {path}::{name} without saying it is slow (only under -m slow)"
            named += 1
    assert named >= 60  # the validation page names them by the dozen


def test_the_reference_patterns_read_what_the_pages_write():
    text = ("`tests/a.py::test_x`, `tests/b/c.py::test_y` (slow) and `tests/d.py::test_z` (partly slow); "
            "the benchmark section `corpus`; the benchmark sections `epoch-speed`, `fit-options` and `matmul-dtypes`")
    assert [(m[1], m[2], m["slow"]) for m in references(text)] == [
        ("tests/a.py", "test_x", None), ("tests/b/c.py", "test_y", " (slow)"), ("tests/d.py", "test_z", " (partly slow)")]
    assert [re.findall(r"`([\w-]+)`", m[1]) for m in SECTION_REFERENCE.finditer(text)] == [
        ["corpus"], ["epoch-speed", "fit-options", "matmul-dtypes"]]


def test_every_benchmark_section_the_pages_name_is_one():
    for page in runnable.documents():
        for found in SECTION_REFERENCE.finditer(page.read_text()):
            for section in re.findall(r"`([\w-]+)`", found[1]):
                assert section in BY_NAME, f"{page.name} names benchmark section {section!r}. Valid: {', '.join(BY_NAME)}"


def matrix(text: str) -> list[tuple[str, ...]]:
    """The support matrix's rows: hardware, backend, hosts, status."""
    rows = re.findall(r"^\| (CPU|GPU|TPU) \| (JAX|TensorFlow) \| (one|several) \| ([^|]+?) \|", text, flags=re.M)
    return [tuple(cell.strip() for cell in row) for row in rows]


def test_readmes_support_matrix_is_the_validation_pages_one_row_each():
    readme = matrix((REPO / "README.md").read_text())
    assert readme == matrix(VALIDATION.read_text())
    assert sorted(row[:3] for row in readme) == sorted(
        (hw, backend, hosts) for hw in ("CPU", "GPU", "TPU") for backend in ("JAX", "TensorFlow")
        for hosts in ("one", "several"))
    assert {row[3] for row in readme} <= {"tested here", "through a seam", "untested", "refused"}


def test_readmes_test_command_is_the_one_ci_runs():
    readme = (REPO / "README.md").read_text()
    [command] = [line for line in readme.splitlines() if line.endswith("-m pytest -q -n 2")]
    assert command in (REPO / ".ci" / "run").read_text().splitlines()


LAUNCHERS = ("srun", "mpirun", "mpiexec")


def block_commands(text: str) -> list[str]:
    """Each `acceltrain ...` command of the text's bash blocks: each command of a line that runs acceltrain
    (itself, or under srun or mpirun)."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            starts = [0] + [i + 1 for i, word in enumerate(words) if word in ("&&", ";", "|")]
            for start in starts:
                command = words[start:]
                if command and Path(command[0]).name in LAUNCHERS and "acceltrain" in command:
                    command = command[command.index("acceltrain"):]
                if command and Path(command[0]).name == "acceltrain":
                    end = next((i for i, word in enumerate(command) if word in ("&&", ";", "|")), len(command))
                    commands.append(" ".join(["acceltrain", *command[1:end]]))
    return commands


def inline_flags(text: str) -> list[tuple[str, str]]:
    """(verb, --flag) for each flag of inline code that starts `acceltrain VERB` (prose may show part of a
    command, so only its flags are checked)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return [(span.split()[1], flag) for span in re.findall(r"`acceltrain (?:[a-z]+)[^`]*`", prose)
            for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", span)]


def refusal(command: str) -> str | None:
    """argparse's message when `command` does not parse, else None."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            cli._parser().parse_args(shlex.split(command)[1:])
    except SystemExit:
        return errors.getvalue()
    return None


def test_every_command_the_pages_show_parses_with_todays_parser():
    shown = [(page.name, command) for page in runnable.documents() for command in block_commands(page.read_text())]
    assert len(shown) >= 20
    for page, command in shown:
        assert refusal(command) is None, f"{page} shows `{command}`, which acceltrain refuses:\n{refusal(command)}"


def test_every_flag_the_prose_gives_a_verb_is_one_of_its_flags():
    verbs = {name: {flag for action in verb._actions for flag in action.option_strings}
             for name, verb in cli_reference.verbs(cli._parser()).items()}
    for page in runnable.documents():
        for verb, flag in inline_flags(page.read_text()):
            assert verb in verbs, f"{page.name} shows `acceltrain {verb}`. Valid commands: {', '.join(verbs)}"
            assert flag in verbs[verb], f"{page.name} shows `acceltrain {verb} ... {flag}`, a flag {verb} does not have"


def test_a_flag_that_does_not_exist_is_refused():
    assert "unrecognized arguments: --no-such-flag" in refusal("acceltrain train --no-such-flag")


def test_commands_are_read_from_blocks_and_flags_from_inline_code():
    text = ("Run `acceltrain train --epochs 2`, or `acceltrain devices [--json]`, or `acceltrain launch`.\n```bash\n"
            "srun --nodes 2 acceltrain run train.py --epochs 10   # one task per GPU\nacceltrain launch --processes 2 \\\n"
            "  train.py\npip install acceltrain && .venv/bin/acceltrain devices\n```\n")
    assert block_commands(text) == ["acceltrain run train.py --epochs 10", "acceltrain launch --processes 2 train.py",
                                    "acceltrain devices"]
    assert inline_flags(text) == [("train", "--epochs"), ("devices", "--json")]


def test_the_plan_chart_was_drawn_from_the_committed_record():
    made = json.loads(make_figures.PROVENANCE.read_text())["plan-big-mlp.png"]
    assert made["record_sha256"] == make_figures.record_digest(), \
        "benchmarks/results/plan-cost.json changed: run `python docs/make_figures.py --only plan` and commit the chart"


def test_every_figure_is_shown_and_says_where_it_came_from():
    made = json.loads(make_figures.PROVENANCE.read_text())
    figures = {path.name for path in make_figures.FIGURES.glob("*.png")}
    assert figures == set(made) == {"report.png", "plan-big-mlp.png"}
    shown = "".join(page.read_text() for page in runnable.documents())
    assert all(f"figures/{name}" in shown for name in figures)
    assert refusal(made["report.png"]["command"]) is None  # the run it shows is still a command
    assert {"made", "machine", "versions"} <= set(made["report.png"])
