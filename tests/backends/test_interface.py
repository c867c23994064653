"""The backend seam: both backend modules define the same public functions (backends.INTERFACE), plus
only what each lists in OWN; neutral code reaches them through Runtime.backend_module."""

import json
import subprocess

from acceltrain import backends
from tests import support

_PUBLIC_FUNCTIONS = """
import inspect, json, importlib
names = {}
for backend in ("jax", "tensorflow"):
    module = importlib.import_module(f"acceltrain.backends.{backend}")
    ours = (module.__name__, module.__name__ + ".")  # a package's functions live in its modules
    functions = {name for name, value in vars(module).items()
                 if inspect.isfunction(value) and value.__module__.startswith(ours) and not name.startswith("_")}
    names[backend] = {"functions": sorted(functions), "own": list(module.OWN), "NAME": module.NAME,
                      "SPLITS_UNEVEN_BATCHES": module.SPLITS_UNEVEN_BATCHES, "SHARDS": module.SHARDS}
print(json.dumps(names))
"""


def test_both_backends_define_the_same_public_functions():
    done = subprocess.run(support.command()[:1] + ["-c", _PUBLIC_FUNCTIONS], env=support.env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    names = json.loads(done.stdout.strip().splitlines()[-1])
    sharding = {backend: set(backends.SHARDING) if found["SHARDS"] else set() for backend, found in names.items()}
    shared = {backend: set(found["functions"]) - set(found["own"]) - sharding[backend]
              for backend, found in names.items()}
    assert shared["jax"] == shared["tensorflow"] == set(backends.INTERFACE), {
        "only jax": shared["jax"] - shared["tensorflow"], "only tensorflow": shared["tensorflow"] - shared["jax"]}
    for backend, found in names.items():
        assert set(found["own"]) <= set(found["functions"]), f"{backend}.OWN names a function it lacks"
        assert found["NAME"] == backend and isinstance(found["SPLITS_UNEVEN_BATCHES"], bool)
    # The one capability flag: JAX shards and has every name of SHARDING; TensorFlow has none of them.
    assert (names["jax"]["SHARDS"], names["tensorflow"]["SHARDS"]) == (True, False)
    assert set(backends.SHARDING) <= set(names["jax"]["functions"])
    assert not set(backends.SHARDING) & set(names["tensorflow"]["functions"])


def test_neutral_code_asks_the_capability_flag_not_for_a_sharding_name():
    """Whether a backend shards is asked one way, `backend_module.SHARDS` (issue 36: it was asked 10 ways under 6
    names, hasattr(framework, "relayout"), "abstract_state", "verify_steps" ...)."""
    import re

    asked = re.compile(r"(?:hasattr|getattr)\([^,()]+, \"(?P<name>\w+)\"")
    found = sorted(f"{path.relative_to(support.REPO)}: {match['name']}"
                   for path in (support.REPO / "src" / "acceltrain").rglob("*.py")
                   for match in asked.finditer(path.read_text()) if match["name"] in backends.SHARDING)
    assert not found, f"asked for a sharding name instead of SHARDS: {found}"


def test_the_runtime_exposes_its_backend_module(runtime):
    from acceltrain.backends import jax as jax_backend

    assert runtime.backend_module is jax_backend and runtime.backend == "jax"


def test_tensorflow_refuses_several_processes_in_words():
    code = ("from acceltrain.backends import tensorflow as tf_backend\n"
            "for call in (lambda: tf_backend.start_processes(None), lambda: tf_backend.gathering_predictions(None),\n"
            "             lambda: tf_backend.shard_inputs_per_process(None)):\n"
            "    try:\n"
            "        call()\n"
            "    except Exception as error:\n"
            "        print(type(error).__name__, error)\n")
    done = subprocess.run(support.command()[:1] + ["-c", code], env=support.env(), capture_output=True, text=True,
                          timeout=120)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("UsageError") and "--backend jax" in line for line in lines), done
