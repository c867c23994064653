"""tests/conftest.py's leave_no_global_state_behind fails a test that leaves global state changed (issue 20,
item 18: it missed a patched trainer, signal handlers, sys.argv/sys.path and files left in the working folder)."""

import pytest

from tests import conftest, support

pytest_plugins = "pytester"

LEAKING_TESTS = '''
import os, signal, sys

def test_argv():
    sys.argv.append("--left-behind")

def test_path():
    sys.path.append("/left/behind")

def test_signal():
    signal.signal(signal.SIGUSR2, lambda signum, frame: None)

def test_file():
    open("left_behind.txt", "w").write("x")

def test_working_directory(tmp_path):
    os.chdir(tmp_path)

def test_clean(tmp_path):
    (tmp_path / "fine.txt").write_text("x")
'''


def test_each_kind_of_leak_fails_its_test_by_name(pytester):
    pytester.makeconftest("from tests.conftest import leave_no_global_state_behind  # noqa: F401\n")
    pytester.makepyfile(test_leaks=LEAKING_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=6, errors=5)  # each body passes; the fixture fails its teardown
    text = result.stdout.str()
    for expected in ("sys.argv (", "sys.path (added ['/left/behind']", "signal handlers of ['SIGUSR2']",
                     "files in the working directory", "left_behind.txt", "the working directory ("):
        assert expected in text, text


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytester's subprocess imports this checkout's tests and acceltrain."""
    monkeypatch.setenv("PYTHONPATH", support.env()["PYTHONPATH"] + ":" + str(support.REPO))
    return pytester


def test_a_trainer_method_left_replaced_is_named_with_where_the_replacement_came_from_and_put_back(runtime):
    from acceltrain.backends import keras_internals

    JAXTrainer = keras_internals.trainer_class("jax")  # keras-nightly 3.16: named Trainer
    before = conftest._keras_methods()
    fit = JAXTrainer.fit
    JAXTrainer.fit = lambda model, *args, **kwargs: None  # as a hook that was never taken off
    leaks = conftest._methods_left_replaced(before)
    assert JAXTrainer.fit is fit  # put back
    assert len(leaks) == 1 and f"{JAXTrainer.__name__}.fit replaced (by code in" in leaks[0] \
        and "test_leak_fixture.py" in leaks[0]
