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
    assert {row[3] for row in readme} <= {"tested here", "through a seam", "run once by hand", "untested", "refused"}


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


# --- Figures typed into the pages: a measured one is quoted from its record (between <!-- measured --> markers,
# benchmarks/render.py) or printed by a runnable block (its output checked); what remains must be a setting of
# the code, a test's bound, or a fact of another project, each listed here with what it is. A new one fails.

FIGURE = re.compile(r"(?<![\w.\-/])(?:\d[\d,]*(?:\.\d+)?\s*(?:%|×|x(?= )|MiB|GiB|KiB|MB|GB|ms\b|s\b|GFLOP|TFLOP|"
                    r"min\b|minutes?\b|seconds?\b|hours?\b)|\d+(?:\.\d+)?e-?\d+\b)")
NOT_PROSE = (re.compile(r"<!-- measured:[\w-]+/[\w-]+ -->.*?<!-- /measured -->", re.S),  # rendered from a record
             re.compile(r"^```.*?^```", re.S | re.M),  # code: commands and their flags; outputs checked (runnable.py)
             re.compile(r"<!--.*?-->", re.S), re.compile(r"`[^`\n]+`"))  # markers; inline code (flags, values)
NOT_MEASURED = {  # (page, the figure as written): what it is
    ("README.md", "2 %"): "setting: decisions.py's checkpoint cost bound",
    ("watchdog.md", "0 %"): "a description (a process using no CPU)",
    ("getting-started.md", "2e-3"): "setting: the recipe's learning rate",
    ("big-models.md", "25 %"): "setting: the memory margin planning keeps",
    ("big-models.md", "2 ×"): "a mesh shape (2 × 4 devices)",
    ("big-models.md", "1 MiB"): "setting: weights under it are left whole",
    ("big-models.md", "14 MiB"): "the example's --device-memory",
    ("checkpoints.md", "2 %"): "setting: decisions.py's checkpoint cost bound",
    ("checkpoints.md", "5 minutes"): "setting: decisions.py's checkpoint interval bound",
    ("checkpoints.md", "1e-6"): "a test's bound",
    ("checkpoints.md", "2 ×"): "a mesh shape",
    ("clusters.md", "10 s"): "setting: the wait for the others at a failed exit",
    ("clusters.md", "5 s"): "setting: the launcher's grace after SIGTERM",
    ("clusters.md", "130 s"): "setting: jax.distributed's heartbeat timeout as acceltrain sets it",
    ("clusters.md", "60 s"): "setting: the watchdog's floor (watchdog.py)",
    ("checkpoints.md", "30 s"): "setting: launch's grace after a notice (ACCELTRAIN_NOTICE_GRACE_SECONDS)",
    ("clusters.md", "30 s"): "setting: launch's grace after a notice, and Kubernetes's default terminationGracePeriodSeconds",
    ("plan.md", "1 ms"): "setting: the shortest step at peak whose samples/s plan prints",
    ("speed.md", "1 %"): "a bound the benchmark is held to (the ledger's cost)",
    ("your-script.md", "2 minutes"): "setting: decisions.choose_plain_recheck's shortest plain rerun",
    ("your-script.md", "10 minutes"): "setting: decisions.choose_plain_recheck's longest failed run rechecked",
    ("validation.md", "60 s"): "a test's bound and stall bound",
    ("validation.md", "8 s"): "a test's stall bound",
    ("validation.md", "60 ms"): "a test's input: the straggler's extra time a step",
    ("validation.md", "1e-2"): "a test's input: the learning rate",
    ("validation.md", "5 %"): "a test's bound",
    ("clusters.md", "100 s"): "JAX's default heartbeat timeout",
    ("clusters.md", "300 s"): "JAX's initialization timeout",
    ("plan.md", "16 GiB"): "a TPU v5e chip's memory, as published (planning/targets.py cites it)",
    ("plan.md", "3 %"): "a test's bound",
    ("plan.md", "6 x"): "arithmetic: FLOPs of a training step, 6 x params x batch",
    ("plan.md", "80 %"): "setting: the estimate's bound",
    ("plan.md", "1.3 x"): "a test's bound",
    ("speed.md", "5 %"): "a test's bound",
    ("tpus.md", "5 minutes"): "setting: how long connect() tries a TPU",
    ("your-script.md", "0.05 s"): "setting: checks.FLOAT64_WORTH_SAYING_SECONDS",
    ("your-script.md", "8 MiB"): "setting: arrays under it are not timed",
    ("index.md", "32 ×"): "arithmetic: Keras's default batch of 32 times 50 steps",
    ("index.md", "1200 ×"): "arithmetic: the recipe's batch times 50 steps",
    ("index.md", "10%"): "the seed's symptom: chance accuracy over 10 classes",
    ("validation.md", "120 s"): "a test's bound",
    ("validation.md", "20 s"): "a test's bound",
    ("validation.md", "30 s"): "a test's bound: launch's grace after a notice",
    ("validation.md", "0 %"): "a description (a process using no CPU)",
    ("validation.md", "0.2 %"): "a test's bound",
    ("validation.md", "2 ×"): "a mesh shape",
    ("validation.md", "16 GiB"): "a TPU v5e chip's memory, as published",
    ("validation.md", "3 %"): "a test's bound",
    ("validation.md", "6 x"): "arithmetic: 6 x params x batch",
    ("validation.md", "1.3 x"): "a test's bound",
    ("validation.md", "1e-6"): "a test's bound",
    ("validation.md", "5 minutes"): "setting: decisions.py's checkpoint interval bound",
}


def typed_figures(page: Path) -> list[tuple[int, str]]:
    """(line, figure) of each figure in the page's prose: a number with a unit of size, time, share or ratio, or in
    scientific notation, outside code, markers and rendered quotes."""
    text = page.read_text()
    for pattern in NOT_PROSE:  # blanked, not removed: line numbers stay the page's
        text = pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    return [(number, found.group(0)) for number, line in enumerate(text.splitlines(), 1)
            for found in FIGURE.finditer(line)]


def test_no_page_types_a_measured_figure():
    pages = [page for page in runnable.documents() if page.name != "cli.md"]  # cli.md: generated from the parser
    typed = [f"{page.relative_to(REPO)}:{line}: {figure!r}" for page in pages for line, figure in typed_figures(page)
             if (page.name, figure) not in NOT_MEASURED]
    assert not typed, ("figures typed into the pages, not quoted from a record: " + "; ".join(typed) + ". Quote a "
                       "measured one between <!-- measured:SECTION/NAME --> markers (benchmarks/render.py), let a "
                       "runnable block print it, or drop it; a setting, bound or outside fact goes in NOT_MEASURED, "
                       "saying which.")
    used = {(page.name, figure) for page in pages for _, figure in typed_figures(page)}
    assert set(NOT_MEASURED) <= used, f"NOT_MEASURED lists figures no page has now: {set(NOT_MEASURED) - used}"


def test_a_typed_figure_is_found_and_a_quoted_or_coded_one_is_not(tmp_path):
    from tests import slow_runs

    record = {"tests/a.py::t": {"finished": "then", "commit": "56766e2", "outcome": "passed"}}
    table = slow_runs.rendered("`tests/a.py::t` (slow)\n<!-- slow-runs -->\n<!-- /slow-runs -->\n", record)
    (tmp_path / "table.md").write_text(table)
    assert typed_figures(tmp_path / "table.md") == []  # a commit of digits and an e is no figure
    page = tmp_path / "page.md"
    page.write_text("It took 17.4 MiB here,\nand 0 to 6e-7 in three runs.\n"
                    "<!-- measured:default-job/train-vs-hand -->1.075×<!-- /measured --> and `--device-memory 14MiB`\n"
                    "```bash\n#   acceltrain: 25.2 MiB\n```\n")
    assert typed_figures(page) == [(1, "17.4 MiB"), (2, "6e-7")]


def test_the_validation_page_says_when_each_slow_test_last_ran_from_the_record():
    from tests import slow_runs

    text = VALIDATION.read_text()
    assert slow_runs.SECTION.search(text), "docs/validation.md lost its <!-- slow-runs --> markers"
    assert text == slow_runs.rendered(text, slow_runs.load()), \
        "docs/validation.md's slow-test table differs from tests/slow-runs.json: run `python -m tests.slow_runs`"
    assert slow_runs.table(text, {}).count("\n") - 2 == len(set(slow_runs.SLOW_REFERENCE.findall(
        slow_runs.SECTION.sub("", text)))) >= 15  # a row for each slow test the page names


def test_a_claim_whose_slow_test_has_no_recorded_pass_says_not_run_yet():
    """Issue 41: most slow tests had never run while the page cited them as evidence. Beside each one the page names
    without a recorded pass (none, failed, skipped), "not run yet"; once it passes, the words go; the table itself is
    left to its rows. The page holds to it through the test above (rendered from the record)."""
    from tests import slow_runs

    page = ("A: `tests/a.py::test_a` (slow), B: `tests/b.py::test_b` (partly slow) — not run yet, "
            "C: `tests/c.py::test_c` (slow) — not run yet, D: `tests/d.py::test_d` (slow), E: `tests/e.py::test_e`.\n"
            "<!-- slow-runs -->\nold\n<!-- /slow-runs -->\n")
    record = {"tests/b.py::test_b": {"finished": "then", "commit": "abc", "outcome": "passed"},
              "tests/d.py::test_d": {"finished": "then", "commit": "abc", "outcome": "failed"}}
    text = slow_runs.rendered(page, record)
    claims, table = text.split("<!-- slow-runs -->")
    assert claims == ("A: `tests/a.py::test_a` (slow) — not run yet, B: `tests/b.py::test_b` (partly slow), "
                      "C: `tests/c.py::test_c` (slow) — not run yet, D: `tests/d.py::test_d` (slow) — not run yet, "
                      "E: `tests/e.py::test_e`.\n")
    assert "not run yet" not in table and "| `tests/b.py::test_b` (partly slow) | then | `abc` | passed |" in table
    assert slow_runs.rendered(text, record) == text  # rendered twice: the same page
    on_the_page = VALIDATION.read_text().split("<!-- slow-runs -->")[0]
    for name, _ in set(slow_runs.SLOW_REFERENCE.findall(on_the_page)):
        passed = slow_runs.passed(slow_runs.load().get(name))
        assert (f"`{name}` (slow) — not run yet" in on_the_page or f"`{name}` (partly slow) — not run yet" in
                on_the_page) is not passed, name
    for page in slow_runs.other_pages():  # README.md and the guides cite slow tests too: the same words there
        text = page.read_text()
        assert text == slow_runs.annotated(text, slow_runs.load()), \
            f"{page.relative_to(REPO)} cites a slow test its record disagrees with: run `python -m tests.slow_runs`"


def test_a_slow_run_is_recorded_by_its_controller_with_how_each_test_ended(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from tests import slow_runs

    monkeypatch.setattr(slow_runs, "RECORD", tmp_path / "slow-runs.json")
    recorder = slow_runs.Recorder()
    for nodeid, when, outcome, keywords in [("tests/a.py::t[1]", "call", "passed", {"slow": 1}),
                                            ("tests/a.py::t[2]", "call", "failed", {"slow": 1}),
                                            ("tests/b.py::u", "setup", "skipped", {"slow": 1}),
                                            ("tests/c.py::fast", "call", "passed", {})]:
        recorder.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, when=when, outcome=outcome, keywords=keywords))
    worker = SimpleNamespace(workerinput={}, workeroutput={})  # an xdist worker: its counts go to the controller
    recorder.pytest_sessionfinish(SimpleNamespace(config=worker))
    assert not slow_runs.RECORD.exists() and worker.workeroutput == {slow_runs.LEFT_OUT: {}}
    recorder.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace()))
    record = slow_runs.load()
    assert {name: run["outcome"] for name, run in record.items()} == {"tests/a.py::t": "failed", "tests/b.py::u": "skipped"}
    page = "`tests/a.py::t` (partly slow)\n<!-- slow-runs -->\n<!-- /slow-runs -->\n"
    assert f"| `tests/a.py::t` (partly slow) | {record['tests/a.py::t']['finished']} |" in slow_runs.rendered(page, record)


def test_a_run_of_some_of_a_slow_tests_cases_is_recorded_as_that_many_and_is_no_pass_of_the_claim(tmp_path,
                                                                                                  monkeypatch):
    """A -k selection of a parametrized slow test (one corpus case) once recorded the whole matrix as passed."""
    from types import SimpleNamespace

    from tests import slow_runs

    monkeypatch.setattr(slow_runs, "RECORD", tmp_path / "slow-runs.json")
    recorder = slow_runs.Recorder()
    slow = SimpleNamespace(get_closest_marker=lambda name: name == "slow" or None)
    recorder.pytest_deselected([SimpleNamespace(nodeid=f"tests/a.py::t[{i}]", **vars(slow)) for i in (2, 3, 4)] +
                               [SimpleNamespace(nodeid="tests/a.py::fast", get_closest_marker=lambda name: None)])
    recorder.pytest_runtest_logreport(SimpleNamespace(nodeid="tests/a.py::t[1]", when="call", outcome="passed",
                                                      keywords={"slow": 1}))
    recorder.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace()))
    record = slow_runs.load()
    assert record["tests/a.py::t"]["outcome"] == "passed" and record["tests/a.py::t"]["cases"] == "1 of 4"
    assert "tests/a.py::fast" not in record
    page = "Claim: `tests/a.py::t` (slow).\n<!-- slow-runs -->\n<!-- /slow-runs -->\n"
    text = slow_runs.rendered(page, record)
    assert text.startswith("Claim: `tests/a.py::t` (slow) — not run yet.") and "| passed (1 of 4 cases) |" in text


def test_a_run_of_some_cases_after_a_whole_run_keeps_the_whole_run_beside_it(tmp_path, monkeypatch):
    """A corpus matrix passed whole, then the cases later code touched rerun: the claim rests on both, and the table
    shows both; where the whole run failed, a later selection that passed is still no recorded pass."""
    from types import SimpleNamespace

    from tests import slow_runs

    monkeypatch.setattr(slow_runs, "RECORD", tmp_path / "slow-runs.json")
    slow = SimpleNamespace(get_closest_marker=lambda name: name == "slow" or None)

    def session(outcomes: dict, deselected: int):
        recorder = slow_runs.Recorder()
        recorder.pytest_deselected([SimpleNamespace(nodeid=f"tests/a.py::t[x{i}]", **vars(slow))
                                    for i in range(deselected)])
        for case, outcome in outcomes.items():
            recorder.pytest_runtest_logreport(SimpleNamespace(nodeid=f"tests/a.py::t[{case}]", when="call",
                                                              outcome=outcome, keywords={"slow": 1}))
        recorder.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace()))
        return slow_runs.load()["tests/a.py::t"]

    page = "Claim: `tests/a.py::t` (slow).\n<!-- slow-runs -->\n<!-- /slow-runs -->\n"
    for whole, claim in (("passed", "Claim: `tests/a.py::t` (slow)."), ("failed", "Claim: `tests/a.py::t` (slow) — not run yet.")):
        slow_runs.RECORD.unlink(missing_ok=True)
        session({"1": "passed", "2": whole}, deselected=0)
        session({"1": "passed"}, deselected=1)
        run = session({"2": "passed"}, deselected=1)  # a second selection keeps the same whole run
        assert run["cases"] == "1 of 2" and run["whole"]["outcome"] == whole
        text = slow_runs.rendered(page, {"tests/a.py::t": run})
        assert text.startswith(claim + "\n"), text
        assert f"| passed (1 of 2 cases); all its cases last: {whole}, {run['whole']['finished']}, `" in text
    slow_runs.RECORD.unlink()
    assert not slow_runs.passed(session({"1": "passed"}, deselected=1))  # no whole run at all: no pass
