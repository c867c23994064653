"""Preemption: the decisions (tables), and each notice and hang on a real job under `acceltrain launch` with 2
processes: the notice ends the job with one agreed checkpoint and exit 42, the rerun of the same command continues
to the uninterrupted result; a process that stops is named and the job ends with 42, nothing left running."""

import os
import queue
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from acceltrain import preemption
from acceltrain.preemption import EXIT_RESTART, Beat
from tests import support

# --- The decisions, over plain values --------------------------------------------------------------------------

NOW = 1000.0


def _beat(steps, silent=0.0, idle=0.0, host="h", in_step=None):
    return Beat(steps=steps, last_step_at=NOW - idle, beat_at=NOW - silent, host=host, phase=f"fit, after step {steps}",
                in_step=in_step)


@pytest.mark.parametrize("beats, expected, said", [
    ({0: _beat(7), 1: None}, 1, "process 1 never started a fit"),  # it took another path, or never came up
    ({0: _beat(7), 1: _beat(5, silent=40)}, 1, "process 1 (host h) stopped making progress at step 5"),  # SIGSTOP
    ({0: _beat(7, silent=30), 1: _beat(5, silent=40), 2: _beat(7)}, 1, "nothing from it for 40 s"),  # longest silent
    ({0: _beat(7, idle=60), 1: _beat(3, idle=61)}, 1, "while the others reached step 7"),  # alive, stuck in its code
    ({0: _beat(7, idle=60), 1: _beat(7, idle=60)}, None, "all wait in one collective"),
    # at the same step, process 1 stuck in a callback after it while process 0 waits in the next step's collective
    ({0: _beat(11, idle=60, in_step=True), 1: _beat(11, idle=61, in_step=False)}, 1,
     "process 1 (host h) stopped making progress at step 11 (fit, after step 11), its last step 61 s ago, outside any "
     "step while the others are in the next one"),
    ({0: _beat(7, idle=60, in_step=True), 1: _beat(7, idle=60, in_step=True)}, None, "all wait in one collective"),
    ({0: _beat(7, idle=60, in_step=False), 1: _beat(7, idle=60, in_step=False)}, None, "all wait in one collective"),
    ({0: None, 1: None}, 0, "process 0 never started"),
])
def test_choose_stopped(beats, expected, said):
    index, why = preemption.choose_stopped(beats, NOW, silent_seconds=10)
    assert index == expected and said in why, why


@pytest.mark.parametrize("own, expected", [
    ({0: 0.010, 1: 0.010}, []),
    ({0: 0.010, 1: 0.020, 2: 0.011}, [1]),  # 2× the others' median
    ({0: 0.010, 1: 0.014}, []),  # 1.4×: under the factor
    ({0: 0.010}, []),  # one process: none to compare with
    ({0: 0.0, 1: 0.0}, []),
])
def test_choose_stragglers(own, expected):
    slow, why = preemption.choose_stragglers(own)
    assert slow == expected and why
    if slow:
        assert f"process {slow[0]} took" in why and "×" in why


@pytest.mark.parametrize("exits, notice, stalled, expected", [
    ([(0, 42), (1, 42)], signal.SIGTERM, False, 42),  # every process saved the agreed step
    ([(1, 42), (0, 42)], signal.SIGUSR1, False, 42),  # Slurm's --signal
    ([(0, 42), (1, -9)], signal.SIGTERM, False, 128 + signal.SIGTERM),  # one was killed before it saved
    ([(0, 42), (1, 42)], signal.SIGINT, False, 130),  # Ctrl-C: the user's stop, not to be restarted
    ([(0, 0), (1, 0)], signal.SIGTERM, False, 0),  # the job ended before the notice took effect: its work is done
    ([(0, 0), (1, 42)], signal.SIGTERM, False, 128 + signal.SIGTERM),  # one finished, one did not: no promise
    ([(0, 0), (1, 0)], None, False, 0),
    ([(1, 42), (0, -9)], None, False, 42),  # a process preempted on its own notice; the other stopped after it
    ([(0, 42), (1, -9)], None, True, 42),  # a stall named and ended
    ([(1, 2), (0, -15)], None, False, 2),
    ([(1, 1), (0, 42)], None, False, 1),  # the first failure decides: a crash, not to be restarted
])
def test_choose_job_exit(exits, notice, stalled, expected):
    code, why = preemption.choose_job_exit(exits, 2, notice=notice, stalled=stalled)
    assert code == expected and why


@pytest.mark.parametrize("signum, expected", [(signal.SIGTERM, 42), (signal.SIGUSR1, 42), (signal.SIGINT, 130)])
def test_a_notice_exits_42_and_ctrl_c_keeps_its_own_code(signum, expected):
    assert preemption.exit_code(signum) == expected


def test_a_notice_outside_training_raises_the_restartable_stop_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(preemption.PreemptedOutsideTraining) as stopped:
        with preemption.notices_outside_training():
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(5)  # the handler raises at the next bytecode: never reached in full
    assert stopped.value.exit_code == EXIT_RESTART and "SIGUSR1 received outside training" in str(stopped.value)
    assert signal.getsignal(signal.SIGTERM) is before


class _Stopped(preemption.AcceltrainError):
    def __init__(self, exit_code):
        super().__init__(f"stopped with {exit_code}")
        self.exit_code = exit_code


@pytest.mark.parametrize("exit_code, window, told", [
    (EXIT_RESTART, "open", True),     # a notice: the ledger said, then the stop goes on
    (130, "open", False),             # Ctrl-C: a stop, but no restart to weigh
    (1, "open", False),               # a failure
    (EXIT_RESTART, None, False),      # stopped before the run's window opened: no ledger yet
    (EXIT_RESTART, "no ledger", False),  # ACCELTRAIN_LEDGER=0
])
def test_the_ledger_is_told_once_when_a_notice_stops_the_run(exit_code, window, told):
    """`train`'s and `run`'s one helper (preemption.ledger_told_when_preempted): the ledger told on exit 42 only."""
    from types import SimpleNamespace

    ledgers = {"open": SimpleNamespace(ledger="the ledger"), "no ledger": SimpleNamespace(ledger=None), None: None}
    said = []
    with pytest.raises(_Stopped):
        with preemption.ledger_told_when_preempted(lambda: ledgers[window], said.append):
            raise _Stopped(exit_code)
    assert said == (["the ledger"] if told else [])


# --- Under launch, 2 processes × 2 devices -----------------------------------------------------------------------

SCRIPT = support.SCRIPTS / "plain_checkpointed.py"
STEADY = support.SCRIPTS / "steady_steps.py"


def _launch(folder: Path, out: Path, *extra, script_args=()):
    return support.command("launch", "--processes", 2, "--simulate-devices", 2, "--checkpoint-dir", folder,
                           "--checkpoint-every", "10 steps", "--resume", *extra, SCRIPT, out, *script_args)


def _weights(path):
    with np.load(path) as saved:
        return [saved[name] for name in sorted(saved.files, key=lambda n: int(n.split("_")[1]))]


class _Job:
    """A launched job whose output lines are read in a thread, so a test can wait for a line, never a sleep."""

    def __init__(self, command, **env):
        self.process = subprocess.Popen(command, env=support.env(**env), stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        self.lines, self.seen = queue.Queue(), []
        # A line both processes said alike comes once as "[all] ..." (launch's SameLines): read as each one's.
        threading.Thread(target=lambda: [self.lines.put(each) for line in self.process.stdout
                                         for each in support.per_process(line).splitlines(keepends=True)]
                         + [self.lines.put(None)],
                         daemon=True).start()

    def wait_for(self, pattern: str, timeout: float = 240) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                line = None
            if line is None:
                self.kill()
                pytest.fail(f"no line matching {pattern!r} within {timeout} s:\n" + "".join(self.seen[-40:]))
            self.seen.append(line)
            if found := re.search(pattern, line):
                return found

    def wait_for_file(self, pattern: Path, timeout: float = 240) -> Path:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            if found := sorted(pattern.parent.glob(pattern.name)) if pattern.parent.is_dir() else []:
                return found[0]
            time.sleep(0.02)
        self.kill()
        pytest.fail(f"no {pattern} before the job ended or {timeout} s passed")

    def end(self, timeout: float = 240) -> tuple[int, str]:
        try:
            code = self.process.wait(timeout=timeout)
        finally:
            self.kill()
        while (line := self.lines.get(timeout=30)) is not None:
            self.seen.append(line)
        return code, "".join(self.seen)

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _preempted_then_rerun(tmp_path, send, *, when="training", script_args=()):
    """The same command twice on a checkpoint folder that does not exist yet: the first gets `send` (a list of
    signals to the launcher) once `when` holds; the second runs to the end. Returns both outputs."""
    folder, out = tmp_path / "ckpt", tmp_path / "out.npz"
    job = _Job(_launch(folder, out, script_args=script_args), PYTHONUNBUFFERED="1")
    if when == "training":  # a checkpoint of this run exists: it is past its first steps
        job.wait_for_file(folder / "fit-1" / "epoch-*")
    elif when == "before the first step":  # both processes connected: JAX runs, fit has not started
        job.wait_for(r"^\[\d\] acceltrain: jax on cpu")
        job.wait_for(r"^\[\d\] acceltrain: jax on cpu")
    elif when == "writing":  # Orbax's temporary folder of a save exists: the write is in flight
        job.wait_for_file(folder / "fit-1" / "*.orbax-checkpoint-tmp*")
    for number, signum in enumerate(send):
        if number:  # the launcher acted on the one before (signals of a kind do not queue: sent at once, two are one)
            job.wait_for(r"received: passed on to the 2 processes")
        job.process.send_signal(signum)
    first_code, first = job.end()
    assert not out.exists(), first[-3000:]  # the script did not go on past its fit
    rerun = subprocess.run(_launch(folder, out, script_args=script_args), env=support.env(), capture_output=True,
                           text=True, timeout=400)
    return first_code, first, rerun, folder, out


@pytest.mark.multi_device
def test_sigterm_to_a_launched_job_on_an_empty_folder_exits_42_with_one_agreed_checkpoint(tmp_path):
    """Issue 35's first "done when", its first half (the rerun's result is the slow test below): D does not exist,
    --resume is given; SIGTERM while it trains ends the job with 42, every process saved the same step."""
    folder, out = tmp_path / "ckpt", tmp_path / "out.npz"
    job = _Job(_launch(folder, out), PYTHONUNBUFFERED="1")
    job.wait_for_file(folder / "fit-1" / "epoch-*")
    job.process.send_signal(signal.SIGTERM)
    code, output = job.end()
    assert code == EXIT_RESTART, output[-4000:]
    stopped = set(re.findall(r"^\[\d\] acceltrain: error: Stopped by SIGTERM; a checkpoint is saved in (\S+)\. ", output,
                             re.M))
    assert len(stopped) == 1, output[-4000:]  # one agreed step, the same in both processes
    assert output.count("Exit 42: preempted, checkpoint saved, restart me.") == 2
    assert "launch: exit 42: every process saved the agreed step" in output
    assert Path(stopped.pop()).is_dir()


@pytest.mark.slow  # three 2-process runs: a few minutes here
@pytest.mark.multi_device
@pytest.mark.parametrize("send, when", [
    ([signal.SIGTERM], "training"),
    ([signal.SIGUSR1], "training"),  # Slurm's --signal
    ([signal.SIGTERM, signal.SIGTERM], "training"),  # a second notice: the save goes on
    ([signal.SIGTERM], "writing"),  # a notice while a checkpoint is written in the background
])
def test_a_preempted_job_rerun_with_the_same_command_ends_with_the_uninterrupted_result(tmp_path, send, when):
    whole = subprocess.run(_launch(tmp_path / "whole", tmp_path / "whole.npz"), env=support.env(), capture_output=True,
                           text=True, timeout=400)
    assert whole.returncode == 0, whole.stderr[-3000:]
    code, first, rerun, folder, out = _preempted_then_rerun(tmp_path, send, when=when)
    assert code == EXIT_RESTART, first[-4000:]
    if len(send) > 1:
        assert "received again: the checkpoint of the agreed step is being written; carrying on" in first
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "resuming from epoch-" in rerun.stderr
    for got, expected in zip(_weights(out), _weights(tmp_path / "whole.npz"), strict=True):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.multi_device
def test_a_notice_before_the_first_step_exits_42_and_the_rerun_starts(tmp_path):
    code, first, rerun, folder, out = _preempted_then_rerun(tmp_path, [signal.SIGTERM], when="before the first step")
    assert code == EXIT_RESTART, first[-4000:]
    assert "launch: exit 42" in first
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert out.exists()


def _stop_process_1(stall_timeout: int):
    """Process 1 of a steadily training job SIGSTOPped once it printed its step 5: the job's code, output, the
    seconds from the stop to the job's end, and process 1's pid."""
    job = _Job(support.command("launch", "--processes", 2, "--simulate-devices", 2, "--stall-timeout", stall_timeout,
                               STEADY), PYTHONUNBUFFERED="1")
    pid = int(job.wait_for(r"^\[1\] process 1 pid (\d+) at step 5").group(1))
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        code, output = job.end(timeout=stall_timeout * 4 + 60)
    finally:
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)
    return code, output, time.monotonic() - stopped, pid


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.mark.multi_device
@pytest.mark.parametrize("stall_timeout", [8, pytest.param(60, marks=pytest.mark.slow)])
def test_a_stopped_process_is_named_and_the_job_exits_42_leaving_nothing(stall_timeout):
    """Issue 35's second "done when" at stall bound 60 s (slow): SIGSTOP to process 1 ends the job within 200 s,
    naming process 1 as the one that stopped making progress, exit 42, nothing left running. Process 0's watchdog
    reads every process's heartbeat from the coordinator's key-value store."""
    code, output, seconds, pid = _stop_process_1(stall_timeout)
    assert code == EXIT_RESTART, output[-4000:]
    assert re.search(r"^\[0\] acceltrain: error: process 1 \(host \S+\) stopped making progress at step \d+ .*nothing "
                     r"from it for \d+ s \(frozen, or its host is gone\)", output, re.M), output[-4000:]
    assert _gone(pid)
    assert seconds < 2 * stall_timeout + 60, seconds  # the bound, the stacks, the stop; 200 s at 60 s


@pytest.mark.multi_device
def test_a_straggler_is_said_in_one_line_with_its_figures():
    """Process 1 keeps its CPU busy 60 ms after each step: process 0 says so, with each figure, within the run."""
    job = _Job(support.command("launch", "--processes", 2, "--simulate-devices", 2, STEADY, "--burn-ms", 60),
               PYTHONUNBUFFERED="1")
    try:
        found = job.wait_for(r"^\[0\] acceltrain: warning: straggler: process 1 took ([\d.]+) ms of its own a step, "
                             r"([\d.]+)× the others' ([\d.]+) ms \(over 1.5×\)", timeout=300)
    finally:
        job.kill()
    assert float(found.group(1)) >= 60 and float(found.group(2)) > 1.5


# --- Engine notices that are not signals: seams, tested with fakes (no TPU VM, no Ray cluster here) ----------------

@pytest.mark.parametrize("tpu_vm, ray, expected", [
    (False, False, []), (True, False, ["tpu-maintenance"]), (False, True, ["ray"]), (True, True, ["tpu-maintenance", "ray"]),
])
def test_choose_notice_sources(tpu_vm, ray, expected):
    names, why = preemption.choose_notice_sources(tpu_vm, ray)
    assert names == expected and why


@pytest.mark.parametrize("said, pending", [("NONE", False), ("", False), ("TERMINATE_ON_HOST_MAINTENANCE\n", True),
                                           ("MIGRATE_ON_HOST_MAINTENANCE", True)])
def test_a_tpu_maintenance_event_is_a_notice(said, pending):
    asked = []
    assert preemption.tpu_maintenance_pending(lambda url: asked.append(url) or said) is pending
    assert asked == [preemption.MAINTENANCE_URL]


def test_an_engine_notice_is_sent_as_sigterm_once_at_the_checked_steps_and_a_failing_source_is_dropped():
    sent, said, answers = [], [], iter([False, True])

    def broken():
        raise RuntimeError("no Ray session")

    notices = preemption.EngineNotices({"broken": broken, "ray": lambda: preemption.ray_preemption_pending(
        lambda: object() if next(answers) else None)}, send=lambda pid, sig: sent.append((pid, sig)), say=said.append)
    for step in range(1, 4 * preemption.NOTICE_CHECK_STEPS):
        notices.at_step(step)
    assert sent == [(os.getpid(), signal.SIGTERM)]  # at the second checked step, once
    assert "broken notice could not be read (no Ray session); asking it no more" in said[0]
    assert said[1] == f"acceltrain: ray notice at step {2 * preemption.NOTICE_CHECK_STEPS}: stopping as on SIGTERM"


# --- A notice at any moment (issue 44): the first compile, validation, an evaluate, the script's code after fit ----

NOTICE_AT = support.SCRIPTS / "notice_at.py"


def _notice_job(folder: Path, out: Path, moment: str, *extra) -> list[str]:
    return support.command("launch", "--processes", 2, "--checkpoint-dir", folder, "--checkpoint-every", "10 steps",
                           *extra, NOTICE_AT, out, moment)


@pytest.fixture(scope="module")
def uninterrupted_notice_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whole")
    done = subprocess.run(_notice_job(folder / "ckpt", folder / "weights", "none"), env=support.env(),
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "weights"


@pytest.mark.slow  # two 2-process runs each, and the uninterrupted one once: a few minutes here
@pytest.mark.multi_device
@pytest.mark.parametrize("moment", ["compile", "validation", "evaluate", "after-fit"])
def test_a_notice_at_any_moment_ends_the_job_within_30_s_with_42_and_the_rerun_ends_as_if_never_stopped(
        tmp_path, uninterrupted_notice_run, moment):
    """SIGTERM to the launcher (passed to both processes, where jax.distributed owns it), sent by process 1 at
    `moment` (notice_at.py says where, and the line is read before the clock starts): the job exits 42 within the
    launcher's 30 s grace, each process either saving the one agreed step or saying there was nothing in flight to
    save; the rerun with --resume ends with the weights of a run never stopped."""
    folder, out = tmp_path / "ckpt", tmp_path / "weights"
    job = _Job(_notice_job(folder, out, moment), PYTHONUNBUFFERED="1")
    job.wait_for(rf"^\[1\] notice sent at {moment}$")
    sent = time.monotonic()
    code, output = job.end(timeout=120)
    took = time.monotonic() - sent
    assert code == EXIT_RESTART and took < 30, (code, took, output[-4000:])
    assert "launch: exit 42: every process saved the agreed step" in output, output[-4000:]
    assert not list(tmp_path.glob("weights.*.npz")), output[-4000:]  # the script did not run on to its end
    stopped = set(re.findall(r"^\[\d\] acceltrain: error: Stopped by SIGTERM; a checkpoint is saved in (\S+)\. ",
                             output, re.M))
    nothing = re.findall(r"^\[\d\] acceltrain: a notice \(SIGTERM\) reached the job (.*): nothing in flight to save",
                         output, re.M)
    if moment == "validation":  # the epoch's steps are done: one agreed checkpoint, the rest of the pass skipped
        assert len(stopped) == 1 and output.count("Exit 42: preempted, checkpoint saved, restart me.") == 2, output
        assert "validation skipped after the notice" in output
        batches = [int(n) for n in re.findall(r"^\[0\] validation batch (\d+)$", output, re.M)]
        assert batches and max(batches) < 7, batches  # the pass was cut short
        assert re.search(r"^\[0\] (\d+)/\1 - (?!.*val_).* loss: [\d.]+", output, re.M), output[-4000:]  # no val_
    elif moment == "compile":  # before the first step: nothing to save, or (the notice agreed after it) step 1's
        assert len(nothing) == 2 or len(stopped) == 1, output[-4000:]
    else:
        assert len(nothing) == 2 and set(nothing) == {"outside training (an evaluate or predict outside fit, the "
                                                      "script's code after fit)"}, output[-4000:]
        if moment == "evaluate":
            batches = [int(n) for n in re.findall(r"^\[0\] evaluate batch (\d+)$", output, re.M)]
            assert batches and max(batches) < 7, batches  # it ended inside the evaluate
    rerun = subprocess.run(_notice_job(folder, out, "none", "--resume"), env=support.env(), capture_output=True,
                           text=True, timeout=400)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    for rank in (0, 1):
        for got, expected in zip(_weights(f"{out}.{rank}.npz"), _weights(f"{uninterrupted_notice_run}.{rank}.npz"),
                                 strict=True):
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("counters, processes, started_at, waited, expected", [
    ({0: 0}, 2, None, 0.0, "wait"),  # process 1's count not published yet
    ({0: 0}, 2, None, 10.0, "exit"),  # ... and never: decided with what there is
    ({0: 0, 1: 0}, 2, 0, 0.0, "exit"),  # the first compile: the loop has not polled
    ({0: 7, 1: 7}, 2, 7, 0.0, "exit"),  # a second fit's first compile: no poll since it started
    ({0: 7, 1: 8}, 2, 7, 0.0, "loop"),  # one process has polled in the loop: it stops at the agreed poll (9)
    ({0: 12, 1: 12}, 2, 7, 0.0, "loop"),  # training, or its validation
    ({0: 12, 1: 12}, 2, None, 0.0, "exit"),  # after fit: an evaluate, the script's own code
])
def test_choose_notice_action(counters, processes, started_at, waited, expected):
    assert preemption.choose_notice_action(counters, processes, started_at, waited)[0] == expected


def test_the_notice_watch_ends_a_watched_process_outside_training_with_42_and_one_line(monkeypatch):
    monkeypatch.setattr(preemption, "LOOP", preemption.LoopState())
    said, left = [], []
    notice = {"counters": None}
    watch = preemption.NoticeWatch(lambda: notice["counters"], lambda: 2, say=said.append, leave=left.append)
    assert watch.check() == "none"  # not a run with checkpoints: nothing to act for
    preemption.LOOP.watched = True
    assert watch.check() == "none" and not left  # no notice
    notice["counters"] = {0: 3, 1: 3}
    preemption.LOOP.started_at = 2
    assert watch.check() == "loop" and not left  # the loop has it
    preemption.LOOP.started_at = None
    assert watch.check() == "exit" and left == [EXIT_RESTART] and len(said) == 1
    assert "outside training" in said[0] and "nothing in flight to save" in said[0] and "Exit 42" in said[0]
    preemption.LOOP.handled = True
    assert watch.check() == "none" and left == [EXIT_RESTART]  # the loop saved and exits: nothing more
