import argparse
import io

import pytest
from tests.support import run_cli

from acceltrain import __version__, cli, log


def verbs() -> dict[str, argparse.ArgumentParser]:
    parser = cli._parser()
    (subparsers,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return dict(subparsers.choices)


def test_the_verbs_are_the_ones_this_test_knows():
    assert {"devices", "train", "report", "doctor"} <= set(verbs())


@pytest.mark.parametrize("name", sorted(verbs()))
def test_every_verb_help_has_a_runnable_looking_example(name):
    text = verbs()[name].format_help()
    assert "example" in text
    assert f"  acceltrain {name}" in text  # the example runs this verb, not another
    for flag in ("--quiet", "--verbose"):
        assert flag in text


def test_version_and_help_exit_0_and_bad_usage_exits_2(tmp_path):
    assert run_cli("--version", timeout=60).stdout.strip() == f"acceltrain {__version__}"
    assert run_cli("train", "--help", timeout=60).returncode == 0
    assert run_cli("train", "--epochs", "two", timeout=60).returncode == 2  # argparse's own usage error
    unknown = run_cli("train", "no-such-recipe", "--out", tmp_path / "x", timeout=120)
    assert unknown.returncode == 2 and "Unknown recipe: 'no-such-recipe'" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_verbose_shows_the_traceback_of_an_error(tmp_path):
    result = run_cli("train", "no-such-recipe", "-v", "--out", tmp_path / "x", timeout=120)
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "Unknown recipe" in result.stderr


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert log.paint("fail", "red", io.StringIO()) == "fail"
    assert log.paint("fail", "red", FakeTerminal()) == "\033[31mfail\033[0m"
    monkeypatch.setenv("NO_COLOR", "1")
    assert log.paint("fail", "red", FakeTerminal()) == "fail"


def test_a_slow_phase_says_what_and_how_long_in_a_log(capsys, monkeypatch):
    monkeypatch.setattr(log.Phase, "HEARTBEAT", 0.05)
    with log.phase("compiling") as phase:
        import time

        time.sleep(0.2)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "acceltrain: compiling…"
    assert any(line.startswith("acceltrain: still compiling… ") and line.endswith(" s") for line in lines[1:-1])
    assert lines[-1] == f"acceltrain: compiling: done in {phase.seconds:.1f} s" and phase.seconds >= 0.2


def test_a_slow_phase_counts_in_place_on_a_terminal_and_quiet_silences_it(monkeypatch):
    terminal = FakeTerminal()
    monkeypatch.setattr(log.sys, "stderr", terminal)
    monkeypatch.setattr(log.Phase, "TICK", 0.05)
    with log.phase("connecting"):
        import time

        time.sleep(0.2)
    text = terminal.getvalue()
    assert text.startswith("\racceltrain: connecting…") and "\r\033[Kacceltrain: connecting… 0 s" in text
    assert text.endswith(" s\n") and text.count("\n") == 1  # one line, rewritten in place
    monkeypatch.setattr(log, "_quiet", True)
    quiet = FakeTerminal()
    monkeypatch.setattr(log.sys, "stderr", quiet)
    with log.phase("connecting"):
        pass
    assert quiet.getvalue() == ""
