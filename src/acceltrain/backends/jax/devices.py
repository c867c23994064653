"""JAX's start-up and what it sees: the simulated CPU devices set before JAX starts, a TPU's libtpu skipped where no
TPU is, the devices, kinds and memory of each platform, the processes, the seed and the versions."""

import jax

from acceltrain.backends.jax.compiles import enable_compilation_cache


def prepare(simulate_devices: int | None, platform: str = "auto", tpu: str | None = None) -> None:
    """Split the CPU into `simulate_devices` devices, before JAX starts its backends.

    JAX fixes the device count when its first operation runs; asked for later with another count,
    this is an error rather than a silent single device. JAX finds a TPU VM's chips by itself, so
    `platform` needs nothing here; a TPU name is for TensorFlow's resolver.
    """
    if tpu is not None:
        from acceltrain.errors import UsageError

        raise UsageError(
            f"Received tpu={tpu!r} with the JAX backend. A TPU name is how TensorFlow reaches a remote TPU; "
            "JAX uses the TPU of the VM it runs on. Pass platform='tpu' (--platform tpu), or "
            "backend='tensorflow' to connect to a named TPU."
        )
    enable_compilation_cache()
    if simulate_devices is None:
        _skip_absent_tpu()
        return
    try:
        jax.config.update("jax_platforms", "cpu")  # simulated devices are CPU devices, even beside a GPU
        jax.config.update("jax_num_cpu_devices", simulate_devices)
    except RuntimeError:
        # JAX has started: fine only if it started with the same devices.
        started_with = len(jax.devices("cpu"))
        if jax.default_backend() != "cpu" or started_with != simulate_devices:
            from acceltrain.errors import UsageError

            raise UsageError(
                f"simulate_devices={simulate_devices} was asked for after JAX had started with "
                f"{started_with} CPU device(s) (default backend: {jax.default_backend()}). "
                "JAX fixes its devices when it first runs: call connect(simulate_devices=...) before "
                "anything uses JAX, or start Python with "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={simulate_devices}."
            ) from None


def _skip_absent_tpu() -> None:
    """libtpu installed (jax[tpu], or `acceltrain plan`'s compiler) on a machine with no TPU and no GPU:
    use the CPU without trying the TPU first.

    Left to itself, JAX opens libtpu before the CPU; here that prints libtpu's start-up errors
    (TPU_WORKER_HOSTNAMES ...) on every run and holds /tmp/libtpu_lockfile while the process lives.
    A platform list the user set (JAX_PLATFORMS, jax.config) stands, as does any machine with an
    accelerator's device files.
    """
    import importlib.util
    import os

    from acceltrain.hardware import gpu, tpu

    if os.environ.get("JAX_PLATFORMS") or jax.config.jax_platforms or importlib.util.find_spec("libtpu") is None:
        return
    if tpu.device_files() or gpu.device_files():
        return
    try:
        jax.config.update("jax_platforms", "cpu")
    except RuntimeError:
        pass  # JAX had started already (the caller used it before connect()): its platforms stand


# --- What is there ----------------------------------------------------------------------------

def device_counts() -> dict[str, int]:
    """How many devices each platform has (0 where its runtime is absent or broken)."""
    counts = {}
    for platform in ("tpu", "gpu", "cpu"):
        try:
            counts[platform] = len(jax.devices(platform))
        except RuntimeError:  # "Unknown backend tpu", "no visible GPU", libtpu busy ...
            counts[platform] = 0
    return counts


def devices(platform: str) -> tuple[str, ...]:
    """All devices of the platform across processes, named as Keras names them ("cpu:0")."""
    return tuple(f"{d.platform}:{d.id}" for d in jax.devices(platform))


def device_kind(platform: str) -> str:
    return jax.devices(platform)[0].device_kind


def compute_capability(platform: str) -> str | None:
    """A GPU's CUDA compute capability ("9.0"); None for other platforms and GPUs that report none."""
    if platform != "gpu":
        return None
    return getattr(jax.devices(platform)[0], "compute_capability", None)


def process_count() -> int:
    return jax.process_count()


def process_index() -> int:
    return jax.process_index()


def set_seed(seed: int) -> None:
    """Seed Python, numpy and Keras's generators: weights, dropout and the data order of fit.

    keras.utils.set_random_seed would also import TensorFlow when it is installed, only to seed it:
    four seconds of start-up here, for a generator nothing on JAX draws from.
    """
    import random

    import numpy as np

    from acceltrain.backends import keras_internals

    keras_internals.set_keras_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def versions() -> dict[str, str]:
    import jaxlib
    import keras

    return {"keras": keras.__version__, "jax": jax.__version__, "jaxlib": jaxlib.__version__}


def device_memory(platform: str) -> int | None:
    """Bytes of memory of one device, as the runtime reports it; None where it reports none (CPUs)."""
    try:
        stats = jax.devices(platform)[0].memory_stats() or {}
    except (RuntimeError, AttributeError):
        return None
    return stats.get("bytes_limit")
