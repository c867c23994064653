"""The conformance corpus (tests/corpus.py): ordinary Keras scripts, plainly and under `acceltrain run` and
`launch`. CI runs a handful chosen to cover the kinds of input (arrays with two inputs and outputs, a JAX
stateless train_step, a per-batch callback, a loop without fit) at 1 device against plain, three of them at
8 devices and one under launch; the whole matrix is marked slow and written by benchmarks/corpus.py."""

import pytest

from tests import corpus

CI_ONE_DEVICE = ["functional_two_in_two_out", "custom_train_step", "custom_loop"]
CI_EIGHT_DEVICES = ["functional_two_in_two_out", "custom_train_step", "callback_batch_end"]
CI_LAUNCH = ["functional_two_in_two_out", "sets_its_backend"]  # the second: refused, naming its line
# TensorFlow under MirroredStrategy (issue 33; the third: a newcomer's int(iterations) and steps_per_execution=4);
# the fourth a newcomer's weighted dict model on JAX, its evaluate on one device after a distributed validation
CI_FOUR_DEVICES = ["tf_random_in_data_map", "vae_two_models", "tf_fit_twice_numbers", "weighted_dict_validation"]


@pytest.fixture(scope="module")
def plain_runs(tmp_path_factory):
    """Each script's plain run, made once per test module and shared by the modes compared with it."""
    from tests.support import write_small_mnist

    data = write_small_mnist(tmp_path_factory.mktemp("corpus") / "small_mnist.npz")
    runs = {}

    def plain(name):
        if name not in runs:
            runs[name] = corpus.run(corpus.BY_NAME[name], "plain", data)
            assert not corpus.problems(corpus.BY_NAME[name], runs[name], None), runs[name].stderr[-3000:]
        return runs[name], data

    return plain


def _check(name, mode, plain_runs):
    shape = corpus.BY_NAME[name]
    plain, data = plain_runs(name)
    outcome = corpus.run(shape, mode, data)
    assert corpus.problems(shape, outcome, plain) == [], outcome.stderr[-4000:]
    return outcome


def _matrix(modes, chosen):
    """(name, mode) for every shape and mode, the CI ones plain and the rest marked slow."""
    cases = []
    for shape in corpus.SHAPES:
        for mode in modes:
            if mode in shape.modes():
                marks = () if shape.name in chosen.get(mode, ()) else (pytest.mark.slow,)
                cases.append(pytest.param(shape.name, mode, marks=marks, id=f"{shape.name}-{mode}"))
    return cases


CHOSEN = {"run-1": CI_ONE_DEVICE, "run-4": CI_FOUR_DEVICES, "run-8": CI_EIGHT_DEVICES, "launch-2x2": CI_LAUNCH}


@pytest.mark.multi_device
@pytest.mark.parametrize("name, mode", _matrix(["run-1", "run-4", "run-8", "launch-2x2"], CHOSEN))
def test_the_script_runs_under_acceltrain_as_it_runs_plainly(name, mode, plain_runs):
    outcome = _check(name, mode, plain_runs)

    summary = outcome.summary  # acceltrain's closing line says what it distributed
    if mode in corpus.BY_NAME[name].refused_at:
        assert outcome.refused and summary == ""  # refused before anything ran
    elif name == "custom_loop":
        assert "called no fit, evaluate or predict, so nothing was distributed" in summary
    elif mode != "launch-2x2":
        assert summary.startswith("the script's Keras calls (") and "fit" in summary, outcome.stderr[-2000:]


# --- The harness's own checks can fail --------------------------------------------------------------

def test_a_mode_that_must_be_refused_fails_when_it_runs_or_says_something_else():
    from tests.corpus import Outcome, Shape

    shape = Shape("x.py", "x", refused_at={"launch-2x2": "whose line 6 sets its backend"})

    def outcome(code, stderr):
        return Outcome("x", "launch-2x2", code, 1.0, "", stderr, None, [], [])

    assert corpus.problems(shape, outcome(2, "acceltrain: error: x.py, whose line 6 sets its backend."), None) == []
    assert corpus.problems(shape, outcome(0, "trained"), None)[0].startswith("not refused with")
    assert corpus.problems(shape, outcome(2, "acceltrain: error: another reason"), None)[0].startswith("not refused")


def test_metrics_out_of_tolerance_are_reported_and_counts_compared_exactly():
    plain = {"loss": 1.0, "batches_seen": 32, "shape": [10, 2]}

    assert corpus.mismatches(plain, {"loss": 1.0, "batches_seen": 32, "shape": [10, 2]}, corpus.EXACT) == []
    assert corpus.mismatches(plain, {"loss": 1.0 + 1e-7, "batches_seen": 32, "shape": [10, 2]}, corpus.EXACT) \
        == ["loss: 1.0000001 vs plain 1.0"]
    assert corpus.mismatches(plain, {"loss": 1.03, "batches_seen": 32, "shape": [10, 2]}, corpus.REPLICAS) == []
    assert corpus.mismatches(plain, {"loss": 1.05, "batches_seen": 31, "shape": [10, 2]}, corpus.REPLICAS) \
        == ["loss: 1.05 vs plain 1.0", "batches_seen: 31 vs plain 32"]
    assert corpus.mismatches(plain, {"loss": float("nan"), "batches_seen": 32, "shape": [10, 2]}, corpus.PROCESSES) \
        == ["loss: nan vs plain 1.0"]
    assert corpus.mismatches(plain, {"loss": 1.0}, corpus.REPLICAS) == ["metric names ['loss'] vs plain "
                                                                        "['batches_seen', 'loss', 'shape']"]
    # Under launch: the largest gap measured over the corpus passes; 0.80 vs 0.66 (0.08 + 15 % allowed 0.179) does not.
    assert corpus.mismatches({"first_batch_loss": 0.9901}, {"first_batch_loss": 0.9659}, corpus.PROCESSES) == []
    assert corpus.mismatches({"accuracy": 0.66}, {"accuracy": 0.80}, corpus.PROCESSES) == ["accuracy: 0.8 vs plain 0.66"]


def test_a_metric_the_plain_run_rounds_apart_is_compared_within_its_ulps_and_only_at_one_device():
    """vae_two_models's loss: TensorFlow's plain runs under load printed 11.1156836 and 11.1156845 against 11.1156864
    (corpus.EXACT's note); 8 float32 ulps let those through, not 9, and its reconstruction_loss stays exact."""
    plain = {"loss": 11.115686416625977, "reconstruction_loss": 11.093935012817383}
    ulp = 2.0 ** -20  # a float32's at 11.1

    assert corpus.float32_ulp(11.115686416625977) == ulp and corpus.float32_ulp(0.75) == 2.0 ** -24
    seen = {**plain, "loss": 11.115683555603027}  # 3 ulps below, measured on a plain run under load
    assert corpus.mismatches(plain, seen, corpus.EXACT) == ["loss: 11.115683555603027 vs plain 11.115686416625977"]
    assert corpus.mismatches(plain, seen, corpus.EXACT, ulps={"loss": 8}) == []
    assert corpus.mismatches(plain, {**plain, "loss": plain["loss"] + 8 * ulp}, corpus.EXACT, ulps={"loss": 8}) == []
    assert corpus.mismatches(plain, {**plain, "loss": plain["loss"] + 9 * ulp}, corpus.EXACT, ulps={"loss": 8}) != []
    moved = {**seen, "reconstruction_loss": 11.093935012817383 + ulp}
    assert corpus.mismatches(plain, moved, corpus.EXACT, ulps={"loss": 8}) \
        == [f"reconstruction_loss: {11.093935012817383 + ulp!r} vs plain 11.093935012817383"]
    assert corpus.BY_NAME["vae_two_models"].ulps == {"loss": 8}  # and the REPLICAS tolerance is its own at 4 and 8
    assert corpus.mismatches(plain, {**plain, "loss": 11.3}, corpus.REPLICAS, ulps={"loss": 8}) == []


def test_warnings_must_be_exactly_the_expected_ones():
    stderr = ("acceltrain: warning: each epoch trains on 256 of the 1,024 samples\n"
              "[1] acceltrain: warning: each epoch trains on 256 of the 1,024 samples\n"
              "acceltrain: info line\n")
    got = corpus.acceltrain_warnings(stderr)

    assert got == ["each epoch trains on 256 of the 1,024 samples"]
    assert corpus.warning_problems(["each epoch trains"], got) == []
    assert corpus.warning_problems([], got) == ["unexpected warning 'each epoch trains on 256 of the 1,024 samples'"]
    assert corpus.warning_problems(["float64"], []) == ["missing warning 'float64'"]


def test_a_process_left_running_is_found_by_its_tag_and_killed():
    import os
    import subprocess
    import sys

    tag = "test-left-running"
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              env={**os.environ, corpus.TAG_VARIABLE: tag})
    try:
        left = corpus.kill_left_running(tag)
        assert len(left) == 1 and left[0].startswith(f"{orphan.pid} ")
        assert orphan.wait(timeout=10) == -9
    finally:
        orphan.kill()
        orphan.wait()


def test_metrics_are_read_from_the_last_line_and_from_process_0_under_launch():
    assert corpus.parse_metrics('x\nmetrics: {"a": 1.0}\nmetrics: {"a": 2.0}\n') == {"a": 2.0}
    assert corpus.parse_metrics('[1] metrics: {"a": 1.0}\n[0] metrics: {"a": 3.0}\n') == {"a": 3.0}
    assert corpus.parse_metrics("no metrics\n") is None


def test_a_line_a_mode_must_print_is_missed_when_absent():
    """notes_at: e.g. a batch-1 fit at 4 replicas must say it ran on one device, and why (issue 22)."""
    shape = corpus.Shape("x.py", "x", notes_at={"run-4": ("batch_size=1 does not divide",)})

    def outcome(mode, stderr):
        return corpus.Outcome("x", mode, 0, 1.0, 'metrics: {"a": 1.0}', stderr, {"a": 1.0}, [], [])

    said = "[0] acceltrain: batch_size=1 does not divide over 4 replicas\n"
    assert corpus.problems(shape, outcome("run-4", said), outcome("plain", "")) == []
    assert corpus.problems(shape, outcome("run-4", "batch_size=1 does not divide\n"), outcome("plain", "")) \
        == ["missing line 'batch_size=1 does not divide'"]  # the script's own print is not acceltrain's line
    assert corpus.problems(shape, outcome("run-1", ""), outcome("plain", "")) == []


@pytest.mark.slow
@pytest.mark.multi_device
@pytest.mark.parametrize("mode", ["run-1", "run-4"])
def test_two_runs_of_a_script_at_once_both_pass_as_one_alone_does(mode, plain_runs):
    """Issue 45's intermittent exit after a ViT's fit under run -4 (1 in 5 runs, not seen in 10 runs of the corpus's
    ViT nor 6 of keras.io's shape since): two runs that overlap share nothing of acceltrain's (its compilation cache,
    its files), so both pass with the plain run's metrics. (keras.io's own script shares /tmp/checkpoint.weights.h5
    between its runs, which fails an overlapping run with or without acceltrain: the scripts guide says so.)"""
    from concurrent.futures import ThreadPoolExecutor

    shape = corpus.BY_NAME["augment_attention_split"]
    plain, data = plain_runs(shape.name)
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(lambda _: corpus.run(shape, mode, data), range(2)))

    for outcome in outcomes:
        assert corpus.problems(shape, outcome, plain) == [], outcome.stderr[-4000:]


INTERMITTENT = [("augment_attention_split", "run-4"), ("feature_space_raw_dict", "run-8")]


@pytest.mark.slow
@pytest.mark.multi_device
@pytest.mark.parametrize("name, mode", INTERMITTENT, ids=[f"{name}-{mode}" for name, mode in INTERMITTENT])
def test_an_intermittent_case_passes_ten_runs_in_a_row(name, mode, plain_runs):
    """Issue 45's intermittent cases, each run 10 times, one at a time: the ViT that exited 1 after its fit in 1 of 5
    runs under run -4, and the FeatureSpace model whose fit stood still ~4 minutes under run -8 (TensorFlow's
    distributed dataset dropped between epochs waiting for each replica's autotuning thread:
    backends/tensorflow.py::_device_datasets_untuned). Every run passes with the plain run's metrics within the
    corpus's timeout, and none stands still: no run takes 2 minutes more than the fastest of the ten (the stall stood
    still over 4 minutes; a machine at load 7-15 spread 10 runs of the ViT over 34-78 s)."""
    shape = corpus.BY_NAME[name]
    plain, data = plain_runs(name)
    seconds = []
    for _ in range(10):
        outcome = corpus.run(shape, mode, data)
        assert corpus.problems(shape, outcome, plain) == [], outcome.stderr[-4000:]
        seconds.append(outcome.seconds)

    print(f"{name} {mode}: 10 runs, seconds {[round(each) for each in seconds]}")  # shown with pytest -s
    assert max(seconds) - min(seconds) < 120, [round(each) for each in seconds]
