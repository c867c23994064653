"""The whole benchmark pipeline, end to end, with tiny settings: every benchmark runs and writes a record the
renderer accepts, in a folder of its own, and nothing committed changes. Minutes long: slow."""

import os
import subprocess
import sys

import pytest

from benchmarks import _results, run_all
from benchmarks.sections import SECTIONS
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
    assert "<!-- measured:default-job/train-vs-hand -->" in readme and "(not measured yet" not in readme
    assert all(path.read_bytes() == text for path, text in committed.items()), "a --quick run changed a committed file"
