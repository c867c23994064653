"""The framework behind Keras. Each backend module has the same functions; neutral code calls through them.

A backend module is imported only once connect() has chosen it, so importing acceltrain starts no
framework. Keras reads its backend once, as it is first imported; `import acceltrain, keras` would load Keras
with Keras's own default (tensorflow, which the plain install lacks) before connect() could choose. So
importing acceltrain watches for Keras's first import (choose_before_keras) and, where nobody chose a backend,
sets acceltrain's default there.
"""

import importlib
import importlib.abc
import importlib.util
import os
import sys


def load(name: str):
    """Import the backend module `name` after pointing Keras at it (KERAS_BACKEND is read on import)."""
    if os.environ.get("KERAS_BACKEND") != name:
        _loaded_set.append(name)  # acceltrain's own setting, not the user's: a later connect() says so
    os.environ["KERAS_BACKEND"] = name
    return importlib.import_module(f"acceltrain.backends.{name}")


_loaded_set: list = []


def set_by_load() -> bool:
    """Whether KERAS_BACKEND holds what an earlier load() (an earlier connect() of this process) wrote there, not a
    value the user set: a second connect() must not name it as the user's choice."""
    return bool(_loaded_set) and os.environ.get("KERAS_BACKEND") == _loaded_set[-1]


class _BeforeKeras(importlib.abc.MetaPathFinder):
    """First on sys.meta_path: sees Keras's first import before any module of Keras runs, and finds nothing
    itself (the import goes on as usual). It stays in the list, inert once it has seen Keras: a finder that
    removed itself while the import system walks the list would make it skip the next finder."""

    def __init__(self):
        self.seen_keras = False
        self.set_to = None  # the backend it set as KERAS_BACKEND, if it set one

    def find_spec(self, name, path=None, target=None):
        if name == "keras" and not self.seen_keras:
            self.seen_keras = True
            self.set_to = default_before_keras(os.environ, "keras" in sys.modules)
        return None


def default_before_keras(env, keras_loaded: bool) -> str | None:
    """Where nobody chose Keras's backend (no KERAS_BACKEND, no keras.json of the user's) and Keras is not
    loaded yet: acceltrain's default (decisions.choose_backend: jax where installed), set as KERAS_BACKEND in
    `env`, and returned. None where something else decides (then nothing is set)."""
    from acceltrain import decisions

    if keras_loaded or env.get("KERAS_BACKEND") or keras_config_backend(env)[0] is not None:
        return None
    backend, _ = decisions.choose_backend(None, None, None, jax_importable())
    if backend != "jax":  # no JAX: Keras's own default, tensorflow, is acceltrain's too; nothing to set
        return None
    env["KERAS_BACKEND"] = backend
    return backend


_BEFORE_KERAS = _BeforeKeras()


def choose_before_keras() -> None:
    """Watch for Keras's first import in this process (importing acceltrain calls this; once is enough)."""
    if _BEFORE_KERAS not in sys.meta_path:
        sys.meta_path.insert(0, _BEFORE_KERAS)


def set_before_keras() -> str | None:
    """The backend importing acceltrain set as KERAS_BACKEND for Keras's first import, or None."""
    return _BEFORE_KERAS.set_to


def loaded_keras_backend() -> str | None:
    """The backend Keras was already imported with in this process, if it was."""
    keras = sys.modules.get("keras")
    if keras is None or not hasattr(keras, "backend"):
        return None
    return keras.backend.backend()


# What Keras writes into keras.json the first time it is imported, if the file is missing: its own
# defaults (keras/src/backend/config.py, Keras 3.15.1), not anyone's choice.
KERAS_WRITTEN_CONFIG = {"floatx": "float32", "epsilon": 1e-07, "backend": "tensorflow",
                        "image_data_format": "channels_last"}


def keras_config_backend(env=None) -> tuple[str | None, str]:
    """The backend set in Keras's own config file, and the file's path, as Keras finds it: KERAS_HOME,
    else ~/.keras (/tmp/.keras where home is not writable). None when the file is absent, unreadable,
    names no backend, or holds exactly what Keras writes there itself on its first import."""
    import json

    env = os.environ if env is None else env
    if "KERAS_HOME" in env:
        folder = env["KERAS_HOME"]
    else:
        home = os.path.expanduser("~")
        folder = os.path.join(home if os.access(home, os.W_OK) else "/tmp", ".keras")
    path = os.path.expanduser(os.path.join(folder, "keras.json"))
    try:
        with open(path) as file:
            config = json.load(file)
    except (OSError, ValueError):
        return None, path
    if not isinstance(config, dict) or config == KERAS_WRITTEN_CONFIG:
        return None, path
    return config.get("backend"), path


def jax_compilation_cache_dir(env=None) -> str | None:
    """The folder where connect() keeps JAX's compiled programs between runs, or None when it is off
    (ACCELTRAIN_COMPILATION_CACHE=0): JAX_COMPILATION_CACHE_DIR if set, else XDG_CACHE_HOME or ~/.cache,
    under acceltrain/jax. Here, without JAX, so `doctor` reports the folder connect() will use."""
    env = os.environ if env is None else env
    if env.get("ACCELTRAIN_COMPILATION_CACHE", "1") == "0":
        return None
    if env.get("JAX_COMPILATION_CACHE_DIR"):
        return env["JAX_COMPILATION_CACHE_DIR"]
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "acceltrain", "jax")


def one_of_several_processes() -> bool:
    """Whether this process has joined a jax.distributed job of more than one process. Starts nothing:
    False where JAX was never imported (TensorFlow runs one process only)."""
    import sys

    jax = sys.modules.get("jax")
    return jax is not None and jax.distributed.is_initialized() and jax.process_count() > 1


def started_processes() -> tuple[int, int] | None:
    """(process count, this process's index) of a jax.distributed job already started in this process (Ray
    Train's JaxTrainer starts one on every worker before the user's function runs), else None. Imports
    nothing: a JAX never imported has started no job."""
    import sys

    jax = sys.modules.get("jax")
    if jax is None or not jax.distributed.is_initialized():
        return None
    return jax.process_count(), jax.process_index()


def shut_down_jax_job(seconds: float) -> bool:
    """jax.distributed.shutdown(), a barrier every process of the job reaches at its exit, waited for at
    most `seconds`: True when every process reached it, False when one did not (it is stuck, or gone)."""
    import threading

    jax = sys.modules["jax"]
    done = threading.Event()

    def shut_down():
        try:
            jax.distributed.shutdown()
        except Exception:  # noqa: BLE001  (another process failed the barrier: not every one reached it)
            return
        done.set()

    threading.Thread(target=shut_down, name="acceltrain-shutdown", daemon=True).start()
    return done.wait(seconds)


class JobHeartbeats:
    """Each process's last beat in a jax.distributed job, through the coordinator's key-value store (the store
    every process of the job already reaches; no shared disk needed): the stall watchdog publishes its process's
    beat and, when it fires, reads every process's (watchdog.py, preemption.choose_stopped).

    Never blocks its caller: publish() hands the value to a daemon thread (a store whose host is frozen would
    hold a call there until its RPC gives up), and read() gives up after `seconds`. Uses jax's client object
    (`jax._src.distributed.global_state.client`, as Orbax's multihost utilities do: JAX has no public handle).
    """

    PREFIX = "acceltrain/heartbeat/"

    def __init__(self, processes: int):
        self.processes = processes
        self._latest: str | None = None
        self._wake = None
        self._thread = None

    @staticmethod
    def _client():
        import sys

        jax = sys.modules.get("jax")
        if jax is None or not jax.distributed.is_initialized():
            return None
        from jax._src import distributed

        return distributed.global_state.client

    def publish(self, index: int, beat: dict) -> None:
        import json
        import threading

        self._latest = (index, json.dumps(beat))
        if self._thread is None:
            self._wake = threading.Event()
            self._thread = threading.Thread(target=self._publishing, name="acceltrain-heartbeat", daemon=True)
            self._thread.start()
        self._wake.set()

    def _publishing(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            index, value = self._latest
            client = self._client()
            try:
                if client is not None:
                    client.key_value_set(f"{self.PREFIX}{index}", value, allow_overwrite=True)
            except Exception:  # noqa: BLE001  (the store is gone: the job is ending; nothing to publish to)
                return

    def read(self, seconds: float = 5.0) -> dict[int, dict | None] | None:
        """{process: its last beat, or None if it published none}; None when the store did not answer."""
        import json
        import threading

        found: list = []

        def get():
            client = self._client()
            if client is not None:
                found.append(client.key_value_dir_get(self.PREFIX))

        thread = threading.Thread(target=get, name="acceltrain-heartbeat-read", daemon=True)
        thread.start()
        thread.join(seconds)
        if not found:
            return None
        beats = {int(key.rsplit("/", 1)[1]): json.loads(value) for key, value in found[0]}
        return {index: beats.get(index) for index in range(self.processes)}


def jax_importable() -> bool:
    return importlib.util.find_spec("jax") is not None


# The functions every backend module defines, called by neutral code through `Runtime.backend_module`
# (tests/backends/test_interface.py checks both modules against it). Each module lists what it has beyond
# them, and beyond SHARDING, in OWN: what only that framework needs (a TPU resolver, a compilation cache).
INTERFACE = (
    # start-up
    "prepare", "start_processes", "shard_inputs_per_process", "set_seed", "versions",
    # what is there
    "device_counts", "devices", "device_kind", "compute_capability", "process_count", "process_index",
    # distribution, and the layer of Keras's fit/evaluate/predict that follows it (interception.LAYERS)
    "make_distribution", "distribution_name", "num_replicas", "scope", "release", "follow_placement",
    "own_distribution", "mesh_words",
    "step_callbacks", "steps_one_at_a_time", "op_by_op_made_safe", "keep_data_on_devices",
    # unmodified scripts
    "devices_spanned", "gathering_predictions", "join_shares",
    # the time ledger (acceltrain/ledger.py): compile events, a step's FLOPs
    "watch_compiles", "step_flops", "shapes_of",
)

# What a backend whose one capability flag SHARDS is True has beyond INTERFACE: Keras's distribution API lays out each
# variable there (JAX), so weights are cut over devices (fsdp, model), found again by mesh, moved to another layout,
# measured from shapes, and a first fit weighed and verified. A backend whose SHARDS is False (TensorFlow: its
# strategies replicate) defines none of them. Neutral code asks `backend_module.SHARDS`, never for one of these names.
SHARDING = (
    "make_sharded_distribution", "candidate_distribution", "distribution_of", "is_layout_map", "sharding_parts",
    "indivisible_weights", "variable_layouts", "first_device_bytes", "device_memory", "abstract_state",
    "weighed", "layouts_of", "relayout", "verify_steps", "steps_on_one_device",
)
