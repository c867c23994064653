"""The TensorFlow backend. The TPU path runs against a fake seam (no TPU here); the rest for real,
in subprocesses: a process holds one Keras backend, and the test process keeps JAX's."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import acceltrain as acceltrain_package

tf_backend = pytest.importorskip("acceltrain.backends.tensorflow", reason="TensorFlow is not installed")

from acceltrain.errors import AcceltrainError, UsageError  # noqa: E402
from tests import support  # noqa: E402


def this_acceltrain_env():
    """The environment for a child Python that imports this acceltrain, whatever its working folder."""
    src = str(Path(acceltrain_package.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    env.pop("XLA_FLAGS", None)  # the test process's 8 simulated devices are not the child's
    return env


class NotReady(Exception):
    """Stands for tf.errors.UnavailableError: a TPU that is there but not up yet."""


class NoTPU(Exception):
    """Stands for "Please provide a TPU Name" / "TPUs not found": no TPU by this way."""


class FakeTPUSystem:
    """Records each call into the TPU seam; `failures[way]` lists what each try of that way raises."""

    transient_errors = (NotReady,)

    def __init__(self, failures=None):
        self.failures = {way: list(errors) for way, errors in (failures or {}).items()}
        self.calls = []

    def resolve(self, name):
        self.calls.append(("resolve", name))
        return f"resolver({name})"

    def connect(self, resolver):
        self.calls.append(("connect", resolver))

    def initialize(self, resolver):
        self.calls.append(("initialize", resolver))
        way = resolver[len("resolver("):-1]
        way = None if way == "None" else way
        pending = self.failures.get(way)
        if pending:
            raise pending.pop(0)

    def strategy(self, resolver):
        self.calls.append(("strategy", resolver))
        return f"TPUStrategy({resolver})"


class FakeClock:
    """time.monotonic and time.sleep, where sleeping advances the clock and nothing waits."""

    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def find(system, name=None, timeout_s=60.0, clock=None):
    clock = clock or FakeClock()
    return tf_backend.find_tpu(tf_backend.tpu_ways(name), system=system, timeout_s=timeout_s, sleep=clock.sleep,
                               clock=clock.clock)


# --- The TPU seam -------------------------------------------------------------------------------

def test_a_name_given_is_the_only_way_and_tpu_name_comes_before_local(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    assert tf_backend.tpu_ways(None) == ["local", None]
    monkeypatch.setenv("TPU_NAME", "my-node")
    assert tf_backend.tpu_ways(None) == ["my-node", "local", None]
    assert tf_backend.tpu_ways("my-tpu") == ["my-tpu"]
    monkeypatch.setenv("TPU_NAME", "local")
    assert tf_backend.tpu_ways(None) == ["local", None]


def test_a_named_tpu_follows_the_seeds_steps_in_order():
    system = FakeTPUSystem()
    resolver, tried = find(system, name="my-tpu")
    assert resolver == "resolver(my-tpu)"
    assert tried == []
    assert system.calls == [("resolve", "my-tpu"), ("connect", "resolver(my-tpu)"), ("initialize", "resolver(my-tpu)")]


def test_without_a_name_local_is_tried_first(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    system = FakeTPUSystem()
    resolver, _ = find(system)
    assert resolver == "resolver(local)"
    assert [call for call in system.calls if call[0] == "resolve"] == [("resolve", "local")]


def test_when_local_has_no_tpu_the_bare_resolver_is_next(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    system = FakeTPUSystem({"local": [NoTPU("TPUs not found in the cluster. Failed in initialization")]})
    resolver, tried = find(system)
    assert resolver == "resolver(None)"
    assert [call[1] for call in system.calls if call[0] == "resolve"] == ["local", None]
    assert tried == ["'local' (NoTPU: TPUs not found in the cluster)"]


def test_a_tpu_name_from_the_environment_that_fails_falls_back_to_local(monkeypatch):
    monkeypatch.setenv("TPU_NAME", "old-node")
    system = FakeTPUSystem({"old-node": [NoTPU("Could not lookup TPU metadata")]})
    resolver, tried = find(system)
    assert resolver == "resolver(local)"
    assert tried == ["'old-node' (NoTPU: Could not lookup TPU metadata)"]


def test_a_tpu_not_ready_is_retried_with_doubling_pauses(capsys, monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    system = FakeTPUSystem({"local": [NotReady("Socket closed"), NotReady("Socket closed"), NotReady("x")]})
    clock = FakeClock()
    resolver, tried = find(system, clock=clock)
    assert resolver == "resolver(local)"
    assert clock.sleeps == [1.0, 2.0, 4.0]
    assert tried == []
    progress = capsys.readouterr().err.splitlines()
    assert len(progress) == 3 and all("waiting for the TPU 'local'" in line for line in progress)
    assert "try 2 failed (NotReady: Socket closed); next in 2 s" in progress[1]


def test_retries_stop_at_the_timeout_and_say_how_many_tries():
    class AlwaysNotReady(FakeTPUSystem):
        def initialize(self, resolver):
            self.calls.append(("initialize", resolver))
            raise NotReady("failed to connect to all addresses")

    system = AlwaysNotReady()
    clock = FakeClock()
    resolver, tried = find(system, name="my-tpu", timeout_s=20.0, clock=clock)
    assert resolver is None
    assert sum(clock.sleeps) == pytest.approx(20.0)  # bounded: 1 + 2 + 4 + 8, then the 5 s that were left
    assert clock.sleeps == [1.0, 2.0, 4.0, 8.0, 5.0]
    assert tried == ["'my-tpu' after 6 tries (NotReady: failed to connect to all addresses)"]


def test_after_the_timeout_each_remaining_way_still_gets_one_try(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    class LocalNeverReady(FakeTPUSystem):
        def initialize(self, resolver):
            self.calls.append(("initialize", resolver))
            if resolver == "resolver(local)":
                raise NotReady("not yet")

    system = LocalNeverReady()
    resolver, _ = find(system, timeout_s=3.0)
    assert resolver == "resolver(None)"


def test_prepare_starts_the_tpu_once_and_make_distribution_builds_tpu_strategy(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    system = FakeTPUSystem()
    monkeypatch.setattr(tf_backend, "tpu_system", system)
    monkeypatch.setattr(tf_backend, "_tpu_resolver", None)
    tf_backend.prepare(None, "tpu", None)
    tf_backend.prepare(None, "tpu", None)  # initializing again would wipe the TPU's memory
    assert [call[0] for call in system.calls] == ["resolve", "connect", "initialize"]
    assert tf_backend.make_distribution("data", ("tpu:0", "tpu:1")) == "TPUStrategy(resolver(local))"
    # One TPU core: still TPUStrategy, else Keras would train on the host's CPU.
    assert tf_backend.make_distribution("none", ("tpu:0",)) == "TPUStrategy(resolver(local))"


def test_prepare_with_platform_tpu_and_no_tpu_says_what_was_tried(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    system = FakeTPUSystem({"local": [NoTPU("TPUs not found")], None: [ValueError("Please provide a TPU Name")]})
    monkeypatch.setattr(tf_backend, "tpu_system", system)
    monkeypatch.setattr(tf_backend, "_tpu_resolver", None)
    with pytest.raises(AcceltrainError, match=r"Tried: 'local' \(NoTPU: TPUs not found\); the bare resolver "
                                              r"\(ValueError: Please provide a TPU Name\)"):
        tf_backend.prepare(None, "tpu", None)


def test_prepare_on_another_platform_does_not_look_for_a_tpu(monkeypatch):
    system = FakeTPUSystem()
    monkeypatch.setattr(tf_backend, "tpu_system", system)
    monkeypatch.setattr(tf_backend, "_tpu_resolver", None)
    tf_backend.prepare(None, "gpu", None)
    assert system.calls == []


def test_multi_worker_tf_config_is_refused_with_the_way_out(monkeypatch):
    cluster = {"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))
    with pytest.raises(UsageError, match=r"2 workers.*--backend jax"):
        tf_backend.prepare(None, "auto", None)


def test_the_tpu_strategy_is_named_as_users_know_it():
    class TPUStrategyV2:
        num_replicas_in_sync = 8

    assert tf_backend.distribution_name(TPUStrategyV2()) == "TPUStrategy"
    assert tf_backend.num_replicas(TPUStrategyV2()) == 8
    assert tf_backend.distribution_name(None) == "none" and tf_backend.num_replicas(None) == 1


# --- For real, in a TensorFlow process ------------------------------------------------------------

def acceltrain(*args, cwd):
    return subprocess.run([sys.executable, "-m", "acceltrain", *args], capture_output=True, text=True, cwd=cwd,
                          env=this_acceltrain_env(), timeout=600)


@pytest.mark.tensorflow
def test_with_no_tpu_here_it_notes_so_and_uses_the_cpu(tmp_path):
    result = acceltrain("devices", "--backend", "tensorflow", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    described = json.loads(result.stdout)
    assert (described["platform"], described["distribution"], described["num_replicas"]) == ("cpu", "none", 1)
    assert "no TPU ('local' (NotFoundError" in result.stderr


@pytest.mark.tensorflow
@pytest.mark.parametrize("flags", [["--platform", "tpu"], ["--tpu", "local"]])
def test_asking_for_a_tpu_where_there_is_none_fails_saying_what_was_tried(tmp_path, flags):
    result = acceltrain("devices", "--backend", "tensorflow", *flags, cwd=tmp_path)
    assert result.returncode == 1
    assert "A TPU was asked for" in result.stderr and "Tried: 'local' (NotFoundError" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def tiny_mnist(tmp_path_factory):
    """600 training and 101 test images: an odd test set, so evaluation must not drop its last sample."""
    from acceltrain import datasets

    splits = datasets.load_npz()
    path = tmp_path_factory.mktemp("data") / "small.npz"
    np.savez(path, x_train=splits.x_train[:600], y_train=splits.y_train[:600], x_test=splits.x_test[:101],
             y_test=splits.y_test[:101])
    return path


@pytest.mark.tensorflow
@pytest.mark.parametrize("simulate, strategy, replicas",
                         [([], "none", 1), (["--simulate-devices", "2"], "MirroredStrategy", 2)])
def test_train_names_the_strategy_and_its_replicas(tmp_path, tiny_mnist, simulate, strategy, replicas):
    result = acceltrain("train", "--backend", "tensorflow", *simulate, "--data", str(tiny_mnist), "--epochs", "2",
                        "--batch-size", "200", "--out", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    runtime = metrics["runtime"]
    assert (runtime["backend"], runtime["distribution"], runtime["num_replicas"]) == ("tensorflow", strategy, replicas)
    assert metrics["history"]["loss"][1] < metrics["history"]["loss"][0]
    assert (tmp_path / "out" / "model.weights.h5").is_file()
    assert "jit_compile" not in result.stderr  # XLA stays as Keras (or the user) compiled it: nothing to claim


@pytest.mark.tensorflow
def test_the_backend_set_in_keras_config_file_is_used_and_the_banner_says_so(tmp_path):
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "tensorflow", "floatx": "float32"}))
    result = support.run_cli("devices", "--json", cwd=tmp_path, KERAS_HOME=str(tmp_path))
    assert result.returncode == 0, result.stderr
    described = json.loads(result.stdout)
    assert described["backend"] == "tensorflow"
    assert described["decisions"]["backend"] == f"tensorflow (set in {tmp_path / 'keras.json'})"


@pytest.mark.tensorflow
def test_an_own_train_step_steps_replicas_times_as_far_under_mirrored_strategy_and_the_note_says_so():
    """TensorFlow's own behaviour, shown without acceltrain: an own train_step whose loss is a plain mean over its
    batch takes, with SGD, twice one device's step under MirroredStrategy over 2 replicas (the gradients summed over
    them); one whose loss is Keras's self.compute_loss, a keras.losses object or tf.nn.compute_average_loss takes one
    device's (divided by the replicas already). acceltrain notes each step whose source does not show the scaling
    (a loss object called there does not say it divides: noted, and the note says such a loss needs nothing), and the
    note names the class, the factor a plain mean gets, the way to step as on one device and what needs nothing."""
    done = support.python(support.SCRIPTS / "own_train_step_under_mirrored.py", timeout=300)

    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    ratios = {way: lines[f"{way} ratio"] for way in ("mean", "compute_loss", "keras_loss", "average_loss")}
    assert float(lines["mean one device"]) != 0, done.stdout
    assert ratios == {"mean": "2.0000", "compute_loss": "1.0000", "keras_loss": "1.0000", "average_loss": "1.0000"}
    noted = {way: lines[f"{way} noted"] for way in ratios}
    assert noted == {"mean": "True", "compute_loss": "False", "keras_loss": "True", "average_loss": "False"}
    note = tf_backend.own_step_note("VAE", 4)
    assert note.startswith("VAE's own train_step under 4 replicas: TensorFlow sums its gradients over them. If the "
                           "loss its tape differentiates is a plain mean") and "goes 4× as far as on one device" in note
    assert "num_replicas_in_sync" in note and "keras.losses object, self.compute_loss or tf.nn.compute_average_loss" \
        in note and "divided by the replicas already: nothing to change" in note


class _Stepped:
    """train_step bodies as a script writes them (read, never run: own_step_scales_its_loss reads the source)."""

    def plain_mean(self, data):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(self(data[0]) - data[1]))
        return tape, loss

    def keras_compute_loss(self, data):
        with tf.GradientTape() as tape:
            loss = self.compute_loss(y=data[1], y_pred=self(data[0]))
        return tape, loss

    def average_loss(self, data):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(self(data[0]) - data[1], global_batch_size=64)
        return tape, loss

    def divided_by_replicas(self, data):
        loss = keras.ops.mean(self(data[0]) - data[1]) / tf.distribute.get_strategy().num_replicas_in_sync
        return loss


@pytest.mark.parametrize("step, compute_loss, scales", [
    ("plain_mean", None, False), ("keras_compute_loss", None, True), ("average_loss", None, True),
    ("divided_by_replicas", None, True),
    ("keras_compute_loss", lambda self, **kwargs: 0.0, False),  # its own compute_loss: whatever it returns
])
def test_an_own_steps_source_tells_whether_it_divides_its_loss_by_the_replicas(step, compute_loss, scales):
    import keras

    body = {"train_step": getattr(_Stepped, step)}
    if compute_loss is not None:
        body["compute_loss"] = compute_loss
    model_class = type("Own", (keras.Model,), body)
    below = type("Below", (model_class,), {})  # the step found on a class between the model's and keras.Model
    assert tf_backend.own_step_scales_its_loss(model_class.__new__(model_class)) is scales
    assert tf_backend.own_step_scales_its_loss(below.__new__(below)) is scales
    unreadable = type("Unreadable", (keras.Model,), {"train_step": eval("lambda self, data: data")})  # noqa: S307
    assert tf_backend.own_step_scales_its_loss(unreadable.__new__(unreadable)) is False


@pytest.mark.tensorflow
def test_a_fit_with_its_own_train_step_is_noted_only_where_its_source_does_not_divide_its_loss(tmp_path):
    """Under `acceltrain run --simulate-devices 2` (TensorFlow, 2 replicas): the step whose loss is a plain mean is
    noted, the one whose loss is Keras's self.compute_loss is not; both train."""
    done = support.run_cli("run", "--simulate-devices", "2", support.SCRIPTS / "own_train_steps_noted.py",
                           cwd=tmp_path, timeout=300)

    assert done.returncode == 0 and "trained" in done.stdout, done.stderr[-3000:]
    assert "Mean's own train_step under 2 replicas: TensorFlow sums its gradients over them" in done.stderr
    assert "Scaled's own train_step" not in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("body, own", [({}, False), ({"train_step": lambda self, data: {}}, True),
                                       ({"call": lambda self, x: x}, False)])
def test_own_train_step_is_found_on_the_class_or_a_class_between_it_and_keras_model(body, own):
    import keras

    direct = type("Direct", (keras.Model,), dict(body))
    below = type("Below", (direct,), {})
    assert tf_backend.own_train_step(direct.__new__(direct)) is own
    assert tf_backend.own_train_step(below.__new__(below)) is own
    assert tf_backend.own_train_step(keras.Sequential.__new__(keras.Sequential)) is False


def test_a_distributed_datasets_replicas_are_read_untuned_so_dropping_its_iterator_does_not_stand_still():
    """Issue 45's stall: TensorFlow alone (no acceltrain) autotunes each replica's dataset of a MirroredStrategy's
    distributed dataset, whose autotuning threads a dropped iterator waits for (backends/tensorflow.py::
    _device_datasets_untuned: 74 and 134 s on 8 logical CPUs). acceltrain's strategy reads them untuned: every
    replica reads the same batches as TensorFlow's own, the user's pipeline keeps its own setting, and TensorFlow's
    function is its own again once the strategy is released."""
    runs = {}
    for way in ("plain", "acceltrain"):
        done = subprocess.run([sys.executable, str(support.SCRIPTS / "distributed_dataset_dropped.py"), way],
                              capture_output=True, text=True, env=this_acceltrain_env(), timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        runs[way] = json.loads(done.stdout.splitlines()[-1])
    plain, ours = runs["plain"], runs["acceltrain"]

    assert plain["replicas_autotuned"] == [None] * 8  # TensorFlow's default: autotuned
    assert ours["replicas_autotuned"] == [False] * 8
    assert ours["source_autotuned"] == plain["source_autotuned"] is None  # the user's pipeline: as it was made
    assert ours["read"] == plain["read"] and len(ours["read"]) == 10 and len(ours["read"][0]) == 8
    assert ours["tensorflows_own_again"] is True


_TWO_HOLDERS = """
import json, os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from tensorflow.python.data.ops import multi_device_iterator_ops as device_datasets
from acceltrain.backends import tensorflow as backend

untuned = lambda: hasattr(device_datasets._create_device_dataset, "tensorflows")
backend.prepare(2)
first = backend.make_distribution("data", backend.devices("cpu"))
second = backend.make_distribution("data", backend.devices("cpu"))
seen = {"both_open": untuned()}
backend.release(first)
seen["one_released"] = untuned()
backend.release(first)  # released again: the other still holds it
seen["one_released_twice"] = untuned()
backend.release(None)  # a runtime on one device (no strategy) releases nothing
seen["none_released"] = untuned()
backend.release(second)
seen["both_released"] = untuned()
print(json.dumps(seen))
"""


def test_the_untuned_device_datasets_stay_while_any_strategy_made_is_held_and_go_with_the_last():
    """Two runtimes' strategies open: releasing one (a runtime closed, or Runtime.build's new distribution in place of
    connect()'s) keeps TensorFlow's per-device datasets untuned for the other; the last release gives TensorFlow its
    own function back."""
    done = subprocess.run([sys.executable, "-c", _TWO_HOLDERS], capture_output=True, text=True,
                          env=this_acceltrain_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"both_open": True, "one_released": True,
                                                         "one_released_twice": True, "none_released": True,
                                                         "both_released": False}
