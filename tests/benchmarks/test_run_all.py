"""The whole benchmark pipeline, end to end, with tiny settings: every benchmark runs and writes a record the
renderer accepts, in a folder of its own, and nothing committed changes. Minutes long: slow."""

import os
import subprocess
import sys

import pytest

from benchmarks import _results, render, run_all
from benchmarks.sections import BY_NAME, SECTIONS
from tests.support import REPO


@pytest.mark.slow
def test_run_all_quick_records_every_benchmark_and_renders_them_elsewhere(tmp_path):
    committed = {path: path.read_bytes() for path in [*_results.RESULTS.glob("*.json"), REPO / "BENCHMARKS.md",
                                                       REPO / "README.md"]}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    env.pop("XLA_FLAGS", None)  # each benchmark sets up its own devices, as a user's run does
    done = subprocess.run([sys.executable, "benchmarks/run_all.py", "--quick", "--results", str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    ran = [section for section in SECTIONS if run_all.runnable_here(section)]
    for section in ran:
        record = _results.load(tmp_path / f"{section.name}.json")
        assert record["quick"] is True and record["raw"] and record["provenance"] == _results.MEASURED
        assert f"\n{section.name:28} ok " in done.stdout  # its wall time, in the closing table
    rendered = (tmp_path / "BENCHMARKS.md").read_text()
    assert rendered.count("A --quick run (tiny settings, to check the pipeline)") == len(ran)
    readme = (tmp_path / "README.md").read_text()  # README's figures, filled from the quick records
    _quotes_every_section_that_ran(readme, {section.name for section in ran})
    assert all(path.read_bytes() == text for path, text in committed.items()), "a --quick run changed a committed file"


def _quotes_every_section_that_ran(readme: str, ran: set) -> None:
    """Each of README's markers filled from its section's quick record where that section ran here; only a section
    this machine cannot run (a GPU's: README quotes epoch-speed-gpu) may say it is not measured yet."""
    quoted = [(match["section"], match["content"]) for match in render.MARKER.finditer(readme)]
    assert "default-job" in {section for section, _ in quoted}
    for section, content in quoted:
        assert section in ran or BY_NAME[section].needs, section
        assert (section in ran) is not content.startswith("(not measured yet"), (section, content)


# --- A full run of several sections: its own records do not stop it -------------------------------------------

def _git(folder, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=folder, check=True,
                   capture_output=True)


@pytest.fixture
def committed_tree(tmp_path, monkeypatch):
    """A repository of its own, committed: two sections' records and a source file; its commit."""
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    for name in ("matmul-dtypes", "compile-cache"):
        (results / f"{name}.json").write_text("{}\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "records")
    monkeypatch.setattr(_results, "REPO", tmp_path)
    monkeypatch.setattr(_results, "RESULTS", results)
    monkeypatch.delenv(_results.TREE_COMMIT, raising=False)
    monkeypatch.delenv(_results.OWN_CHANGES, raising=False)
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tmp_path, capture_output=True,
                          text=True).stdout.strip()


def _sections_seeing_the_tree(monkeypatch, also_changes=None):
    """run_all with each section faked: it reads the commit a record of it would name (versions(), in the section's
    own environment), then writes its record, as a section does; `also_changes`: a file the first one edits too."""
    from unittest import mock

    seen, real_run = {}, subprocess.run

    def section(cmd, env=None, cwd=None, **kwargs):
        if cmd[0] == "git":  # versions() reading the tree (subprocess.run is one function for every module)
            return real_run(cmd, env=env, cwd=cwd, **kwargs)
        name = cmd[0]
        with mock.patch.dict(os.environ, env, clear=True):
            seen[name] = _results.versions()
        (_results.RESULTS / f"{name}.json").write_text('{"measured": true}\n')
        if also_changes and len(seen) == 1:
            also_changes.write_text("x = 2\n")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(run_all, "command", lambda section_, quick, folder: [section_.name])
    monkeypatch.setattr(run_all.subprocess, "run", section)
    monkeypatch.setattr(run_all.render, "main", lambda argv: seen.setdefault("rendered", True))
    return seen


def test_a_full_run_of_several_sections_proceeds_over_its_own_records_and_says_so(committed_tree, monkeypatch):
    """Issue 41: `run_all.py --only A B` refused B because A's record left the tree changed. B's record names the
    commit the run began on and the earlier record it ran beside; render accepts it and its provenance says so."""
    seen = _sections_seeing_the_tree(monkeypatch)
    assert run_all.main(["--only", "matmul-dtypes", "compile-cache", "--wait", "0"]) == 0
    assert seen["matmul-dtypes"]["commit"] == committed_tree and "changed_by_this_run" not in seen["matmul-dtypes"]
    assert seen["compile-cache"]["commit"] == committed_tree  # not "+changes": the section is not refused
    assert seen["compile-cache"]["changed_by_this_run"] == ["benchmarks/results/matmul-dtypes.json"]
    assert f"commit {committed_tree}, the tree changed since only by the same run's earlier records (matmul-dtypes)" \
        in _results.versions_phrase(seen["compile-cache"])
    render._refuse_uncommitted(_results.RESULTS / "compile-cache.json", {"provenance": _results.MEASURED,
                                                                          "versions": seen["compile-cache"]}, "")


def test_a_full_run_refuses_changes_that_were_not_its_own(committed_tree, monkeypatch, capsys):
    seen = _sections_seeing_the_tree(monkeypatch, also_changes=_results.REPO / "code.py")
    run_all.main(["--only", "matmul-dtypes", "compile-cache", "--wait", "0"])
    assert seen["compile-cache"]["commit"] == committed_tree + _results.UNCOMMITTED  # code.py changed mid-run
    assert "changed_by_this_run" not in seen["compile-cache"]
    # a tree changed before the run began: nothing runs
    seen.clear()
    assert run_all.main(["--only", "matmul-dtypes", "--wait", "0"]) == 2
    assert not seen and "Received a full run on a tree with uncommitted changes" in capsys.readouterr().err
