"""The stall watchdog (acceltrain/watchdog.py): when it fires, what it prints, and the flag's checks."""

import io

import pytest

from acceltrain import watchdog
from acceltrain.errors import UsageError


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _watchdog(timeout=10.0, process_index=0):
    clock, stream, exits = Clock(), io.StringIO(), []
    dog = watchdog.Watchdog(timeout, process_index, clock=clock, exit=exits.append, stream=stream)
    dog._thread = object()  # the test calls check() itself: no thread
    return dog, clock, stream, exits


def test_it_fires_only_after_the_timeout_without_a_beat_while_armed():
    dog, clock, stream, exits = _watchdog(timeout=10)
    clock.now = 100
    assert not dog.check()  # disarmed: a script's own slow work never trips it
    dog.arm("fit (compiling and running the first step)")
    clock.now = 109
    assert not dog.check()
    dog.beat("fit, epoch 1, after step 1")
    clock.now = 118
    assert not dog.check()  # the beat reset the wait
    clock.now = 119.5
    assert dog.check()
    assert exits == [watchdog.EXIT_STALLED]
    assert "stalled: nothing moved for 10 s in fit, epoch 1, after step 1, after 1 step(s)" in stream.getvalue()


def test_what_it_prints_names_the_phase_the_causes_and_each_stack_line_with_the_process_index():
    dog, clock, stream, _ = _watchdog(timeout=5, process_index=3)
    dog.arm("evaluate (compiling and running the first step)")
    clock.now = 6
    dog.check()
    text = stream.getvalue()
    assert "in evaluate (compiling and running the first step), before its first step (--stall-timeout 5)" in text
    assert "a process that never reached this collective" in text and "uneven data" in text and "dead" in text
    stack_lines = [line for line in text.splitlines() if line.startswith("process 3: ")]
    assert any("test_watchdog.py" in line and "in test_what_it_prints" in line for line in stack_lines)
    assert "larger --stall-timeout (0 turns the watchdog off)" in text


def test_disarmed_after_the_phase_and_off_at_zero():
    dog, clock, _, exits = _watchdog(timeout=5)
    dog.arm("predict")
    dog.disarm()
    clock.now = 60
    assert not dog.check()
    off = watchdog.Watchdog(0, clock=clock, exit=exits.append)
    off.arm("fit")
    assert off._thread is None and not off.check() and exits == []


@pytest.mark.parametrize("given, expected", [(None, watchdog.DEFAULT_STALL_TIMEOUT), (0, 0.0), (90, 90.0), (2.5, 2.5)])
def test_check_timeout_accepts_seconds(given, expected):
    assert watchdog.check_timeout(given) == expected


@pytest.mark.parametrize("given", [-1, "60", True, float("nan")])
def test_check_timeout_refuses_what_is_not_seconds(given):
    with pytest.raises(UsageError, match=r"Received stall_timeout=.*Expected seconds, a number of at least 0"):
        watchdog.check_timeout(given)


def test_the_cli_refuses_a_negative_stall_timeout_with_exit_2(cli, tmp_path):
    script = tmp_path / "nothing.py"
    script.write_text("")
    refused = cli("launch", "--processes", "2", "--stall-timeout", "-5", script, timeout=60)
    assert refused.returncode == 2
    assert "acceltrain: error: Received --stall-timeout=-5.0. Expected seconds" in refused.stderr
    assert "Traceback" not in refused.stderr
