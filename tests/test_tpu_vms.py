"""connect() on the TPU VMs recorded in tests/tpu_environments.py, with the TPU faked where the code
looks for it: device files, an importable libtpu, the metadata server's answer. JAX runs in this
process (its jax.distributed start is recorded, not made); TensorFlow in one subprocess."""

import importlib
import json
import sys

import pytest

import acceltrain
from acceltrain import cluster
from acceltrain.hardware import tpu
from tests import support, tpu_environments
from tests.tpu_environments import ALL, TPUVM


@pytest.fixture
def on_tpu_vm(tmp_path, monkeypatch):
    """Make this host look like `vm` to connect(): its env, device files, libtpu and metadata."""

    def become(vm: TPUVM):
        for name in ("TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID", "TPU_ACCELERATOR_TYPE", "TPU_SKIP_MDS_QUERY", "TPU_NAME"):
            monkeypatch.delenv(name, raising=False)
        for name, value in vm.env.items():
            monkeypatch.setenv(name, value)
        patterns, site = tpu_environments.fake_host(vm, tmp_path)
        monkeypatch.setattr(tpu, "DEVICE_FILES", patterns)
        monkeypatch.syspath_prepend(site)
        importlib.invalidate_caches()
        monkeypatch.setattr(cluster, "tpu_metadata", lambda env: dict(vm.metadata))
        started = []
        from acceltrain.backends import jax as jax_backend

        monkeypatch.setattr(jax_backend, "start_processes", started.append)
        return started

    return become


@pytest.mark.parametrize("vm", ALL, ids=lambda vm: vm.name)
def test_connect_on_jax_runs_one_process_per_host(vm, on_tpu_vm, runtime):
    started = on_tpu_vm(vm)
    connected = acceltrain.connect("jax", verbose=False)
    if vm.processes == "single":
        assert started == [], f"{vm.name}: one host needs no jax.distributed job"
    else:
        [processes] = started
        assert (processes.source, processes.num_processes) == ("tpu", vm.num_processes)
    assert "TPU" in connected.decisions["processes"] or "TPU_WORKER_HOSTNAMES" in connected.decisions["processes"]


def test_device_files_without_libtpu_are_no_tpu_vm(tmp_path, monkeypatch):
    patterns, site = tpu_environments.fake_host(tpu_environments.CLOUD_V4_8, tmp_path)
    monkeypatch.setitem(sys.modules, "libtpu", None)  # libtpu absent, whether or not this venv has the real one
    assert importlib.util.find_spec("libtpu") is None
    assert not cluster.on_cloud_tpu_vm(patterns)
    monkeypatch.delitem(sys.modules, "libtpu")
    monkeypatch.syspath_prepend(site)  # the same device files with a libtpu to drive them: a TPU VM
    assert cluster.on_cloud_tpu_vm(patterns)
    assert not cluster.on_cloud_tpu_vm((str(tmp_path / "nothing*"),))


TENSORFLOW_SCRIPT = r'''
import importlib, json, os, sys, tempfile
# connect("tensorflow") sets this before it loads the backend module; this script loads the module first (to fake
# the TPU system), and TensorFlow's import loads Keras, which acceltrain would otherwise point at jax.
os.environ["KERAS_BACKEND"] = "tensorflow"
from acceltrain import cluster
from acceltrain.hardware import tpu
from acceltrain.backends import tensorflow as tf_backend
from acceltrain.errors import UsageError
from tests import tpu_environments

class FakeTPUSystem(tf_backend.TPUSystem):
    """The seed's steps, recorded: this host has no TPU to initialize."""
    def __init__(self): self.calls = []
    def resolve(self, name): self.calls.append(["resolve", name]); return f"resolver:{name}"
    def connect(self, resolver): self.calls.append(["connect", resolver])
    def initialize(self, resolver): self.calls.append(["initialize", resolver])

results = {}
for vm in tpu_environments.ALL:
    import os
    for name in ("TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID", "TPU_ACCELERATOR_TYPE", "TPU_SKIP_MDS_QUERY", "TPU_NAME"):
        os.environ.pop(name, None)
    os.environ.update(vm.env)
    tpu.DEVICE_FILES, site = tpu_environments.fake_host(vm, tempfile.mkdtemp())
    sys.path.insert(0, site); importlib.invalidate_caches()
    cluster.tpu_metadata = lambda env, vm=vm: dict(vm.metadata)
    tf_backend.tpu_system, tf_backend._tpu_resolver = FakeTPUSystem(), None
    import acceltrain
    try:
        runtime = acceltrain.connect("tensorflow", verbose=False)
        results[vm.name] = {"tpu_steps": tf_backend.tpu_system.calls, "processes": runtime.decisions["processes"]}
    except UsageError as error:
        results[vm.name] = {"refused": str(error), "tpu_steps": tf_backend.tpu_system.calls}
print(json.dumps(results))
'''


def test_connect_on_tensorflow_reaches_the_seeds_tpu_steps_on_one_host():
    done = support.python("-c", TENSORFLOW_SCRIPT, timeout=300, PYTHONPATH=str(support.REPO))
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for vm in ALL:
        found = results[vm.name]
        if vm.tensorflow_refused:
            assert "multi-host TPU slice" in found["refused"] and "--backend jax" in found["refused"], vm.name
            assert found["tpu_steps"] == [], f"{vm.name}: refused before any TPU step"
        else:
            assert "refused" not in found, f"{vm.name}: {found}"
            assert found["tpu_steps"] == [["resolve", "local"], ["connect", "resolver:local"],
                                          ["initialize", "resolver:local"]], vm.name
            assert found["processes"].startswith("1 (")
