"""The time ledger's bookkeeping (acceltrain/ledger.py), on a clock the tests set: no framework, no training."""

import json

import pytest

from acceltrain import ledger


class Clock:
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


def _timeline():
    clock = Clock()
    return ledger.Timeline(clock=clock), clock


def test_an_instant_covered_by_several_parts_is_booked_once_to_the_highest():
    """A compile inside the first step is compilation; a batch fetched while a step runs is the step's; a gap in an
    epoch where acceltrain syncs each step is host syncs; what nothing covers is the rest."""
    pieces = [(ledger._RANK["host_syncs"], 0.0, 10.0),   # the epoch, one step at a time
              (ledger._RANK["device_steps"], 1.0, 5.0),  # the first step ...
              (ledger._RANK["compilation"], 1.5, 3.5),   # ... which compiled
              (ledger._RANK["input_wait"], 4.0, 6.0),    # the next batch, fetched partly while the step ran
              (ledger._RANK["device_steps"], 6.5, 8.0)]
    booked = ledger.attribute(pieces, 0.0, 12.0)
    totals = {}
    for part, start, end in booked:
        totals[part] = totals.get(part, 0.0) + end - start
    assert totals == pytest.approx({"host_syncs": 1.0 + 0.5 + 2.0, "device_steps": 0.5 + 1.5 + 1.5,
                                    "compilation": 2.0, "input_wait": 1.0, "rest": 2.0})
    assert sum(totals.values()) == pytest.approx(12.0)


def test_a_window_sums_to_its_wall_time_across_bookings_and_open_intervals():
    timeline, clock = _timeline()
    with timeline.window(started=90.0, start_up_until=95.0) as window:
        clock.now = 101.0
        epoch = timeline.begin("host_syncs")  # open across the booking below
        timeline.add("device_steps", 101.0, 102.0)
        timeline.add("compilation", 101.5, 101.8)
        clock.now = 103.0
        timeline.book()  # an epoch's start: what came before is summed and forgotten
        assert timeline._intervals == []
        timeline.add("device_steps", 103.0, 104.0)
        clock.now = 105.0
        timeline.end(epoch)
        clock.now = 106.0
    run = window.ledger
    assert run.wall_seconds == pytest.approx(16.0) and sum(run.parts.values()) == pytest.approx(16.0)
    assert run.parts["start_up"] == pytest.approx(5.0) and run.parts["compilation"] == pytest.approx(0.3)
    assert run.parts["device_steps"] == pytest.approx(1.7) and run.parts["host_syncs"] == pytest.approx(2.0)
    assert run.parts["rest"] == pytest.approx(16.0 - 5.0 - 0.3 - 1.7 - 2.0)


def test_nested_windows_each_book_their_own_span_and_facts():
    timeline, clock = _timeline()
    with timeline.window() as outer:
        timeline.count("steps", 3)
        clock.now = 101.0
        with timeline.window() as inner:
            timeline.add("device_steps", 101.0, 102.0)
            timeline.count("steps", 5)
            timeline.note("flops_per_step", 2e9)
            clock.now = 103.0
        timeline.add("checkpoint", 103.0, 104.0)
        clock.now = 104.0
    assert inner.ledger.wall_seconds == 2.0 and inner.ledger.parts["device_steps"] == 1.0
    assert inner.ledger.facts == {"steps": 5, "flops_per_step": 2e9}
    assert outer.ledger.wall_seconds == 4.0 and outer.ledger.parts["checkpoint"] == 1.0
    assert outer.ledger.facts["steps"] == 8


def test_nothing_is_kept_without_a_window_and_the_compile_watch_lives_with_the_windows():
    watching = []

    def watch(timeline):
        watching.append("on")
        return lambda: watching.append("off")

    timeline = ledger.Timeline(watch, clock=Clock())
    timeline.add("device_steps", 1.0, 2.0)
    timeline.count("steps")
    assert timeline._intervals == [] and not timeline._counts and watching == []
    with timeline.window():
        with timeline.window():
            assert watching == ["on"] and timeline.compile_events
    assert watching == ["on", "off"]


def test_the_ledger_can_be_turned_off():
    timeline = ledger.Timeline.from_environment(env={"ACCELTRAIN_LEDGER": "0"})
    with timeline.window() as window:
        timeline.add("device_steps", 0.0, 1e12)
    assert not timeline.enabled and window.ledger is None
    assert ledger.Timeline.from_environment(env={}).enabled


WALL = 100.0


@pytest.mark.parametrize("parts, facts, says", [
    # the largest part, at least RULE_SHARE of the wall, with the facts its rule reads
    ({"compilation": 60, "device_steps": 40}, {"cache_requests": 9, "cache_hits": 1, "compile_seconds_missed": 45},
     "compilation 60 % of this run: the compilation cache was cold (8 of 9 programs not in it, 45.0 s compiling "
     "them); a second run reuses them"),
    ({"compilation": 60, "device_steps": 40}, {"cache_requests": 9, "cache_hits": 9, "compile_seconds_missed": 0},
     None),  # a warm cache: the time is tracing and lowering, which every run does
    ({"compilation": 60, "device_steps": 40}, {"compiles": 9, "cache_off_by": "ACCELTRAIN_COMPILATION_CACHE=0"},
     "cache is off (ACCELTRAIN_COMPILATION_CACHE=0), so every run compiles anew; unset ACCELTRAIN_COMPILATION_CACHE"),
    ({"compilation": 60, "device_steps": 40}, {"compiles": 9, "cache_off_by": "jax_enable_compilation_cache=False"},
     "cache is off (jax_enable_compilation_cache=False), so every run compiles anew; set jax_enable_compilation_cache "
     "back to True"),
    # issue 31: no request of the cache, but no setting of the user's turned it off: no advice to undo one
    ({"compilation": 60, "device_steps": 40}, {"compiles": 9}, None),
    ({"input_wait": 40, "device_steps": 30, "rest": 30}, {}, "input wait 40 % of this run: the input pipeline"),
    ({"checkpoint": 60, "device_steps": 40}, {"checkpoints": 20},
     "checkpoint 60 % of this run (20 checkpoints, 3.00 s each): checkpoint less often"),
    ({"host_syncs": 45, "device_steps": 40, "rest": 15}, {}, "one step at a time"),
    ({"preemption": 30, "device_steps": 25, "rest": 25, "start_up": 20}, {"steps_redone": 70}, "70 steps ran again"),
    ({"input_wait": 20, "device_steps": 18, "rest": 18, "start_up": 18, "evaluation": 13, "checkpoint": 13}, {},
     None),  # no part reaches RULE_SHARE: nothing to single out
    ({"start_up": 70, "device_steps": 30}, {}, None),  # no rule for start-up
    ({"checkpoint": 60, "device_steps": 40}, {}, None),  # no count of checkpoints: no rule
])
def test_a_rule_names_what_would_shrink_the_largest_part_only_from_measured_facts(parts, facts, says):
    advice = ledger.shrink({**dict.fromkeys(ledger.PARTS, 0.0), **parts}, facts)
    assert (advice is None) if says is None else (says in advice), advice


def test_the_line_lists_the_parts_largest_first_and_the_mfu_where_a_peak_is_known():
    parts = {**dict.fromkeys(ledger.PARTS, 0.0), "device_steps": 8.0, "start_up": 2.0}
    run = ledger.Ledger(10.0, parts, 0.0, 10.0, {"flops_per_step": 1e12, "steps": 100,
                                                 "peak_flops_per_second": 50e12})
    assert run.mfu == pytest.approx(1e12 * 100 / 8.0 / 50e12)
    assert run.line() == ("where the 10.0 s went: device steps 8.0 s (80 %), start-up 2.0 s (20 %); the device steps "
                          "ran at 25 % of the devices' published peak FLOP/s (MFU)")


def test_metrics_json_carries_wall_seconds_and_parts_and_reads_back():
    parts = {**dict.fromkeys(ledger.PARTS, 0.0), "device_steps": 3.0, "compilation": 1.0}
    run = ledger.Ledger(4.0, parts, 10.0, 14.0, {"cache_requests": 4, "cache_hits": 1, "steps": 7})
    saved = json.loads(json.dumps(run.as_json()))
    assert saved["wall_seconds"] == 4.0 and saved["parts"] == parts and saved["cache_misses"] == 3
    again = ledger.Ledger.from_json(saved)
    assert again == run and again.line() == run.line()


def test_the_interpreter_start_is_the_interpreters_not_the_shells_that_exec_ed_it():
    """Issue 31: a shell that exec's Python as its last command (`sleep 2 && acceltrain ...` in `sh -c`) keeps its
    process, whose start is the shell's: the interpreter's start comes after the sleep, not before it."""
    import subprocess
    import sys
    import time

    code = "import acceltrain.ledger as l; print(repr(l.interpreter_start()))"
    before = time.time()
    done = subprocess.run(["sh", "-c", f"sleep 2 && exec {sys.executable} -c '{code}'"], capture_output=True,
                          text=True, timeout=120)
    assert before + 2 <= float(done.stdout.strip()) <= time.time(), done  # after the shell's sleep


def test_the_lines_compilation_says_it_counts_every_compile_of_the_run():
    """issue 31: "compiled in 3.8 s" (the first step) and "compilation 16.4 s" (every program) read as one figure."""
    parts = {**dict.fromkeys(ledger.PARTS, 0.0), "device_steps": 6.0, "compilation": 4.0}
    run = ledger.Ledger(10.0, parts, 0.0, 10.0, {"compiles": 23})
    assert "compilation 4.0 s (40 %, every compile of the run: 23 programs)" in run.line()


def test_the_line_says_a_trained_and_an_evaluated_samples_time_and_their_ratio_where_both_were_counted():
    parts = {**dict.fromkeys(ledger.PARTS, 0.0), "device_steps": 6.0, "evaluation": 1.5, "start_up": 2.5}
    run = ledger.Ledger(10.0, parts, 0.0, 10.0, {"samples": 60_000, "evaluation_samples": 10_000})
    assert run.per_sample() == (1e-4, 1.5e-4)
    assert "device steps 6.0 s (60 %, 100.0 µs a sample)" in run.line()
    assert "evaluation 1.5 s (15 %, 150.0 µs a sample: 1.50× a training step's)" in run.line()
    assert ledger.Ledger(10.0, parts, 0.0, 10.0, {}).per_sample() == (None, None)  # nothing counted: nothing said
    assert "a sample" not in ledger.Ledger(10.0, parts, 0.0, 10.0, {"samples": 60_000}).line()
