"""The JAX backend's start-up on a machine with libtpu installed (it is in `dev`) but no TPU."""

import importlib.util

import pytest

from acceltrain.hardware import gpu, tpu


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu not installed")
@pytest.mark.skipif(bool(tpu.device_files() or gpu.device_files()), reason="an accelerator is here")
def test_libtpu_without_a_tpu_starts_quietly_on_the_cpu(cli):
    result = cli("devices", "--json")
    assert result.returncode == 0, result.stderr
    assert '"platform": "cpu"' in result.stdout
    # Left to itself JAX would open libtpu first: its errors on stderr, /tmp/libtpu_lockfile held.
    assert "TPU_WORKER_HOSTNAMES" not in result.stderr and "libtpu" not in result.stderr

