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


def _watchdog(timeout=10.0, process_index=0, cpu=None):
    clock, stream, exits = Clock(), io.StringIO(), []
    dog = watchdog.Watchdog(timeout, process_index, clock=clock, cpu_clock=cpu or Clock(), exit=exits.append,
                            stream=stream)
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
    assert ("in evaluate (compiling and running the first step), before its first step; the bound is --stall-timeout "
            "5 s (a phase's first step may compile)") in text
    assert "a process that never reached this collective" in text and "uneven data" in text and "dead" in text
    stack_lines = [line for line in text.splitlines() if line.startswith("process 3: ")]
    assert any("test_watchdog.py" in line and "in test_what_it_prints" in line for line in stack_lines)
    assert "larger --stall-timeout (the upper bound; 0 turns the watchdog off)" in text


def test_disarmed_after_the_phase_and_off_at_zero():
    dog, clock, _, exits = _watchdog(timeout=5)
    dog.arm("predict")
    dog.disarm()
    clock.now = 60
    assert not dog.check()
    off = watchdog.Watchdog(0, clock=clock, exit=exits.append)
    off.arm("fit")
    assert off._thread is None and not off.check() and exits == []


@pytest.mark.parametrize("timeout, slowest_step, expected_bound, expected_reason", [
    (1800, None, 1800, "the bound is --stall-timeout 1800 s (a phase's first step may compile)"),
    (1800, 0.05, 60, "a step (or a dispatch of several) took at most 0.05 s so far: the bound is max(60 s, 20 × 0.05 s)"),
    (1800, 1.9, 60, "a step (or a dispatch of several) took at most 1.9 s so far: the bound is max(60 s, 20 × 1.9 s)"),
    (1800, 4.5, 90, "a step (or a dispatch of several) took at most 4.5 s so far: the bound is max(60 s, 20 × 4.5 s)"),
    (1800, 120, 1800, "a step (or a dispatch of several) took at most 120 s so far: the bound is --stall-timeout 1800 s, lower than max(60 s, 20 × 120 s)"),
    (30, 0.05, 30, "the bound is --stall-timeout 30 s, lower than max(60 s, 20 × 0.05 s)"),  # the user's: the upper bound
    (600, None, 600, "the bound is --stall-timeout 600 s"),
])
def test_the_stall_bound_follows_the_slowest_step_between_a_floor_and_the_users_timeout(
        timeout, slowest_step, expected_bound, expected_reason):
    bound, reason = watchdog.stall_bound(timeout, slowest_step)
    assert bound == expected_bound and expected_reason in reason


def test_after_the_first_steps_an_idle_process_is_named_within_the_step_bound_not_the_timeout():
    dog, clock, stream, exits = _watchdog(timeout=1800)
    dog.arm("fit (compiling and running the first step)")
    clock.now = 300  # the first step compiles for 5 minutes: not a stall, and not a step time
    assert not dog.check()
    dog.beat("fit, epoch 1, after step 1")
    for step in range(2, 5):  # steps of 1.9 s
        clock.now += 1.9
        dog.beat(f"fit, epoch 1, after step {step}")
    clock.now += 59
    assert not dog.check()
    clock.now += 3  # 62 s without a step, the process idle
    assert dog.check() and exits == [watchdog.EXIT_STALLED]
    assert ("stalled: nothing moved for 62 s in fit, epoch 1, after step 4, after 4 step(s); a step (or a dispatch of "
            "several) took at most 1.9 s so far: the bound is max(60 s, 20 × 1.9 s), and this process was idle (under 10% of a core) for the last "
            "62 s") in stream.getvalue()


def test_a_process_that_keeps_its_cpu_busy_between_steps_is_left_to_the_users_timeout():
    cpu = Clock()
    dog, clock, stream, exits = _watchdog(timeout=600, cpu=cpu)
    dog.arm("fit")
    for _ in range(3):
        clock.now += 1
        dog.beat("fit, epoch 1")
    for _ in range(100):  # a save, a callback, a new input shape compiling: 500 s at half a core
        clock.now += 5
        cpu.now += 2.5
        assert not dog.check()
    clock.now += 60  # then idle: the step bound counts from the last busy moment
    assert dog.check()
    assert "idle (under 10% of a core) for the last 60 s" in stream.getvalue()
    dog, clock, stream, exits = _watchdog(timeout=600, cpu=cpu)
    dog.arm("fit")
    for _ in range(3):
        clock.now += 1
        dog.beat("fit, epoch 1")
    while not dog.check():  # busy throughout: the user's timeout still ends it
        clock.now += 5
        cpu.now += 5
    assert clock.now - 3 == 600
    assert "the bound is --stall-timeout 600 s: this process kept its CPU busy" in stream.getvalue()


def test_a_phase_whose_wait_the_steps_do_not_predict_keeps_the_users_timeout_until_its_next_step():
    dog, clock, _, exits = _watchdog(timeout=1800)
    dog.arm("fit")
    for _ in range(3):
        clock.now += 1
        dog.beat("fit, epoch 1")
    dog.enter("fit, end of epoch 1 (callbacks, checkpoint)", unmeasured=True)
    clock.now += 900
    assert not dog.check()  # a 15-minute checkpoint at 0 % CPU (a slow remote disk): not a stall
    dog.enter("fit, epoch 2")
    clock.now += 59
    assert not dog.check()
    clock.now += 1
    assert dog.check()  # back on the step bound once the next epoch started


def test_watching_arms_for_the_outermost_call_only_and_disarms_after_it():
    dog, clock, _, exits = _watchdog(timeout=10)
    with dog.watching("fit (compiling and running the first step)"):
        with dog.watching("evaluate"):  # fit's validation, or a callback's own evaluate: no new arming
            dog.beat()
        assert dog.stalled_for() == 0  # still armed
    assert dog.stalled_for() is None
    clock.now = 100
    assert not dog.check()
    with watchdog.Watchdog(0).watching("fit") as off:
        assert off.stalled_for() is None


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


# --- In a job of several processes: the beats each publishes, and the one that stopped named (issue 35) ------------

class Heartbeats:
    """backends.JobHeartbeats's seam: what each process published, in memory."""

    def __init__(self, answer=True):
        self.published, self.answer = {}, answer

    def publish(self, index, beat):
        self.published[index] = beat

    def read(self):
        return dict(self.published) if self.answer else None


def _job_watchdog(heartbeats, wall):
    clock, stream, exits = Clock(), io.StringIO(), []
    dog = watchdog.Watchdog(10, 0, clock=clock, cpu_clock=Clock(), exit=exits.append, stream=stream,
                            heartbeats=heartbeats, wall_clock=wall, poll_seconds=1.0)
    dog._thread = object()
    return dog, clock, stream, exits


def test_steps_are_published_once_a_poll_and_a_stall_names_the_process_whose_beats_stopped():
    beats, wall = Heartbeats(), Clock()
    dog, clock, stream, exits = _job_watchdog(beats, wall)
    dog.arm("fit")
    for step in range(1, 5):  # a poll is 1 s here: within it, only the first step writes to the store
        dog.beat(f"fit, epoch 1, after step {step}")
    assert beats.published[0]["steps"] == 1 and beats.published[0]["watching"]
    clock.now = 1.0
    dog.beat("fit, epoch 1, after step 5")
    assert beats.published[0]["steps"] == 5 and beats.published[0]["phase"] == "fit, epoch 1, after step 5"
    beats.published[1] = {"steps": 3, "last_step_at": -1.0, "beat_at": -1.0, "host": "other", "phase": "fit, epoch 1, "
                          "after step 3", "watching": True}  # process 1, frozen since
    clock.now, wall.now = 11, 40
    assert dog.check() and exits == [watchdog.EXIT_STALLED] == [42]
    assert "error: process 1 (host other) stopped making progress at step 3 (fit, epoch 1, after step 3): nothing from " \
           "it for 41 s (frozen, or its host is gone)." in stream.getvalue()


def test_a_beat_says_whether_the_process_is_inside_a_step():
    """A step begun and not yet finished is where a collective waits: a process outside any step while the others
    are in one is the one they wait for (preemption.choose_stopped)."""
    dog, _, _, _ = _job_watchdog(Heartbeats(), Clock())
    dog.arm("fit")
    assert dog.beat_now()["in_step"] is None  # no step begun: not said
    dog.begin_step()
    assert dog.beat_now()["in_step"] is True
    dog.beat("fit, epoch 1, after step 1")
    assert dog.beat_now()["in_step"] is False


def test_a_process_outside_any_watched_call_and_an_unreachable_store_are_said():
    beats, wall = Heartbeats(), Clock()
    dog, clock, stream, _ = _job_watchdog(beats, wall)
    dog.arm("evaluate")
    beats.published[1] = {"steps": 9, "last_step_at": 0.0, "beat_at": 0.0, "watching": False}  # left fit, in its code
    clock.now = 11
    assert dog.check()
    assert "process 1 never started a fit, evaluate or predict that the others are in" in stream.getvalue()
    dog, clock, stream, _ = _job_watchdog(Heartbeats(answer=False), wall)
    dog.arm("fit")
    clock.now = 11
    assert dog.check() and "heartbeats could not be read" in stream.getvalue()


def test_process_0_says_a_straggler_once_from_the_median_of_each_processs_own_time_per_step():
    from acceltrain import preemption

    beats, wall, cpu = Heartbeats(), Clock(), Clock()
    clock, stream = Clock(), io.StringIO()
    dog = watchdog.Watchdog(10, 0, clock=clock, cpu_clock=cpu, exit=lambda code: None, stream=stream,
                            heartbeats=beats, wall_clock=wall, poll_seconds=1.0)
    dog._thread = object()
    dog.arm("fit")
    window = preemption.STRAGGLER_WINDOW_STEPS

    def steps(count, mine, theirs, once=0.0):  # CPU seconds a step; `once`: one step of mine takes that more
        for step in range(count):
            cpu.now += mine + (once if step == count // 2 else 0.0)
            dog.beat("fit")
        beats.published[1] = {"steps": 0, "cpu_per_step": theirs, "last_step_at": 0.0, "beat_at": 0.0,
                              "watching": True}

    cpu.now = 5.0
    dog.beat("fit")  # the first step compiled: not measured
    steps(window - 1, 0.010, 0.011)
    assert dog.check_stragglers() == []  # not yet a window of this process's own steps
    steps(1, 0.010, 0.011)
    assert dog.check_stragglers() == [] and "straggler" not in stream.getvalue()  # alike
    steps(window, 0.010, 0.011, once=1.5)
    assert dog.check_stragglers() == []  # one step of 1.5 s (a compile): not a straggler
    beats.published[1]["cpu_per_step"] = None
    assert dog.check_stragglers() == []  # process 1 has not a window of steps yet
    steps(window, 0.010, 0.030)
    assert dog.check_stragglers() == [1]
    said = stream.getvalue()
    assert "warning: straggler: process 1 took 30.0 ms of its own a step, 3.0× the others' 10.0 ms (over 1.5×), the " \
           "median of each process's last 20 steps" in said
    steps(window, 0.010, 0.030)
    assert dog.check_stragglers() == [] and stream.getvalue() == said  # said once a run


def test_a_steps_own_cpu_is_a_steps_however_its_steps_were_dispatched_and_a_second_beat_of_the_same_steps_adds_none():
    """acceltrain's runner beats after each dispatch, then Keras's batch end beats the same steps again (under launch,
    one step an execution): counted twice, a straggler burning 60 ms a step was said at about 34 ms. A beat says how
    many steps it covers: its CPU is split over them, and a beat of none keeps the CPU for the next step."""
    from acceltrain import preemption
    from acceltrain.training.callbacks import StallWatch

    cpu = Clock()
    dog, clock, _, _ = _watchdog(cpu=cpu)
    watch = StallWatch(dog)
    dog.arm("fit")
    watch.on_epoch_begin(0)
    watch.between_dispatches(1)  # the compiling step: not timed
    for step in range(2, preemption.STRAGGLER_WINDOW_STEPS + 2):
        cpu.now += 0.060
        watch.between_dispatches(step)  # the runner's beat
        watch.on_train_batch_end(step - 1)  # Keras's batch end of the same step
    assert dog.beat_now()["cpu_per_step"] == pytest.approx(0.060)
    assert dog.beat_now()["steps"] == preemption.STRAGGLER_WINDOW_STEPS + 1
    for done in range(25, 25 + 4 * preemption.STRAGGLER_WINDOW_STEPS, 4):  # dispatches of 4 steps, 4 × 10 ms
        cpu.now += 0.040
        watch.between_dispatches(done)
    assert dog.beat_now()["cpu_per_step"] == pytest.approx(0.010)


@pytest.mark.parametrize("beats, steps", [
    ([1, 1, 1], 3),  # one step a beat (Keras's own loop, one step an execution)
    ([4, 4, 2], 10),  # K steps a beat (a dispatch of many steps), the last one short
    ([8, 0, 8, 0], 16),  # each dispatch heard twice: the runner's beat, then Keras's batch end with none new
])
def test_the_step_counts_count_steps_however_many_a_beat_covers(beats, steps):
    """The stall message's "after N step(s)" and the heartbeats' steps (which the stuck-process and straggler lines
    quote) count steps, not beats: under a loop of many steps a dispatch, one beat covers many."""
    heartbeats, wall = Heartbeats(), Clock()
    dog, clock, stream, exits = _job_watchdog(heartbeats, wall)
    dog.arm("fit")
    for index, covered in enumerate(beats):
        clock.now += 1.0  # a poll apart: each beat is published
        dog.beat(f"fit, epoch 1, beat {index + 1}", steps=covered)
    assert dog.beat_now()["steps"] == steps and heartbeats.published[0]["steps"] == steps
    clock.now += 11
    assert dog.check() and exits == [watchdog.EXIT_STALLED]
    assert f"in fit, epoch 1, beat {len(beats)}, after {steps} step(s);" in stream.getvalue()


def test_a_process_is_inside_an_execution_from_its_begin_to_its_end_through_the_dispatches_within_it():
    """Keras's batch begin starts an execution (one step, or steps_per_execution's many); acceltrain's runner beats
    after each dispatch inside it, and Keras's batch end (maybe later, from its callback thread) ends it."""
    dog, clock, _, _ = _job_watchdog(Heartbeats(), Clock())
    dog.arm("fit")
    dog.begin_step()
    for _ in range(3):  # the runner's dispatches: still inside the execution, where its collectives wait
        dog.beat("fit, epoch 1", steps=8, ends_execution=False)
        assert dog.beat_now()["in_step"] is True
    dog.beat("fit, epoch 1, after step 24", steps=0)  # Keras's batch end: no step new, the execution over
    assert dog.beat_now() | {"beat_at": None} == dog.beat_now() | {"beat_at": None, "steps": 24, "in_step": False}
    dog.begin_step()
    dog.begin_step()  # the next execution begins before the last one's batch end arrives (Keras's callback thread)
    dog.beat("fit, epoch 1, after step 25")  # that batch end
    assert dog.beat_now()["in_step"] is True
    dog.beat("fit, epoch 1, after step 26")
    assert dog.beat_now()["in_step"] is False and dog.beat_now()["steps"] == 26


def test_the_stall_watch_counts_the_runners_dispatches_and_keras_batch_ends_as_the_steps_they_ran():
    """Under acceltrain's runner, Keras's batch begin names the execution's first step, the runner's beats the
    steps of the execution done so far, and Keras's batch end the execution's planned last step, also for the
    epoch's last execution, which runs only what is left (50 steps at 32 an execution: 32, then 18)."""
    from acceltrain.training.callbacks import StallWatch

    dog, clock, stream, exits = _watchdog(timeout=1800)
    watch = StallWatch(dog)
    watch.set_params({"epochs": 1, "steps": 50, "verbose": 0})
    dog.arm("fit")
    watch.on_epoch_begin(0)
    for first, dispatches in ((0, (8, 24, 32)), (32, (8, 18))):
        watch.on_train_batch_begin(first)
        for done in dispatches:
            clock.now += 0.5
            watch.between_dispatches(done)
            assert dog.beat_now()["steps"] == first + done and dog.beat_now()["in_step"] is True
        watch.on_train_batch_end(first + 31)
        assert dog.beat_now()["steps"] == first + dispatches[-1] and dog.beat_now()["in_step"] is False
    assert dog.beat_now()["steps"] == 50  # not 64: the last execution ran 18 steps, not 32
    clock.now += 60.5
    assert dog.check() and "after step 64, after 50 step(s)" not in stream.getvalue()
    assert "after 50 step(s)" in stream.getvalue()


def test_evaluate_and_predict_count_steps_under_many_steps_an_execution():
    """Evaluate's and predict's batch ends name their execution's planned last step: the steps counted are the
    steps run (capped at the pass's steps where Keras knows them), each pass from 0."""
    from acceltrain.training.callbacks import StallWatch

    dog, _, _, _ = _watchdog(timeout=1800)
    watch = StallWatch(dog)
    watch.set_params({"steps": 10, "verbose": 0})  # evaluate's: its own pass of 10 batches
    dog.arm("evaluate")
    for name in ("test", "predict"):
        getattr(watch, f"on_{name}_begin")()
        for first in (0, 4, 8):  # 4 steps an execution: 4, 4, then the 2 left
            getattr(watch, f"on_{name}_batch_begin")(first)
            getattr(watch, f"on_{name}_batch_end")(first + 3)
    assert dog.beat_now()["steps"] == 20 and dog.beat_now()["in_step"] is False
