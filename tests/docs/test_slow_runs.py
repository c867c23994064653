"""tests/slow_runs.py's recorder in a real pytest run: what a run of some of a slow test's cases records, however
they were chosen (the page's own tests, tests/docs/test_pages.py, read files only)."""

import json
import os
import subprocess
import sys

from tests.support import REPO


def test_a_run_of_cases_named_by_id_is_recorded_as_that_many_of_all_its_cases(tmp_path):
    """A real pytest run naming 1 of a slow test's 3 cases by id (tests/x.py::t[b]) once recorded all of them as
    passed: nothing was deselected, the others never collected. By -k, and whole, as before; and under xdist, whose
    controller sees no deselection (its workers collect)."""
    (tmp_path / "test_cases.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.slow\n@pytest.mark.parametrize('case', ['a', 'b', 'c'])\ndef test_t(case):\n    pass\n")
    (tmp_path / "conftest.py").write_text(
        "from pathlib import Path\nfrom tests import slow_runs\n"
        "slow_runs.RECORD = Path(__file__).with_name('record.json')\n\n"
        "def pytest_configure(config):\n"
        "    config.addinivalue_line('markers', 'slow: minutes long')\n"
        "    config.pluginmanager.register(slow_runs.Recorder(), 'recorder')\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")

    def recorded(*selection, workers=("-p", "no:xdist")):
        (tmp_path / "record.json").unlink(missing_ok=True)
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", *workers, "-p", "no:cacheprovider",
                               "-m", "slow", *selection], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads((tmp_path / "record.json").read_text())["test_cases.py::test_t"]

    assert recorded("test_cases.py::test_t[b]")["cases"] == "1 of 3"
    assert recorded("test_cases.py::test_t[a]", "test_cases.py::test_t[c]")["cases"] == "2 of 3"
    assert recorded("test_cases.py", "-k", "b")["cases"] == "1 of 3"
    assert "cases" not in recorded("test_cases.py")
    # Under xdist the workers deselect and the controller records (a -k run under -n 2 was recorded whole).
    assert recorded("test_cases.py", "-k", "b", workers=("-n", "2"))["cases"] == "1 of 3"
    assert recorded("test_cases.py::test_t[a]", workers=("-n", "2"))["cases"] == "1 of 3"
    assert "cases" not in recorded("test_cases.py", workers=("-n", "2"))
