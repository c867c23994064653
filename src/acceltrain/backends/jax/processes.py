"""A job of several processes on JAX: jax.distributed joined (its heartbeat bound), each process feeding its own
share, weights split over processes found, and predict's outputs gathered from every process."""

import re

import jax

from acceltrain import preemption

# Seconds without a heartbeat after which jax.distributed declares a process dead and ends the others, aborting
# them (JAX's default is 100). A process that exits is noticed at once (its connection closes: 10 s measured); this
# bound catches a frozen one (SIGSTOP, a host that stops answering). It is over twice the stall watchdog's floor, so
# inside a fit the watchdog speaks first: it names the process that stopped and ends the job with the restartable
# exit 42 (watchdog.py), where JAX's abort would end it with SIGABRT, which no engine restarts on. At 30 s (before
# issue 35) JAX aborted process 0 of a job whose process 1 was SIGSTOPped before a 60 s watchdog bound came.
HEARTBEAT_TIMEOUT_SECONDS = int(2 * preemption.STALL_FLOOR_SECONDS + 10)


def start_processes(processes) -> None:
    """Join this process to its jax.distributed job (a cluster.Processes), before JAX starts its devices; then watch
    for a notice the training loop's step poll cannot act on (preemption.NoticeWatch).

    Fields left None are read by JAX's own cluster detection (Cloud TPU, SLURM, Open MPI).
    """
    if jax.distributed.is_initialized():
        return  # the script or the user called jax.distributed.initialize() already: theirs stands
    _initialize(processes)
    preemption.LOOP.leave = leave_job
    preemption.NoticeWatch(notice_counters, jax.process_count).start()  # counted once a notice comes


def _initialize(processes) -> None:
    # CPU devices of different processes reduce through gloo (JAX ≥ 0.5 defaults to it; older, to none).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    arguments = {"heartbeat_timeout_seconds": HEARTBEAT_TIMEOUT_SECONDS}
    if processes.coordinator is not None:
        # Given in full: keep JAX from filling gaps (local device ids) from a SLURM or MPI environment.
        arguments.update(coordinator_address=processes.coordinator, num_processes=processes.num_processes,
                         process_id=processes.process_id, cluster_detection_method="deactivate")
    jax.distributed.initialize(**arguments)


# --- The notice, agreed (jax.distributed's preemption sync point) ------------------------------------------------
# On SIGTERM to any process, JAX's preemption sync manager (xla/tsl/distributed_runtime/preemption/
# preemption_sync_manager.cc) writes RECEIVED_PREEMPTION_NOTICE to the coordination service's key-value store; then
# every process, in a thread of its own, publishes under PREEMPTION_CURRENT_COUNTER/ the last number it passed to
# reached_preemption_sync_point, waits for the others at a barrier, and takes the largest + 1 as the sync point.
# Read through the client JAX keeps (`jax._src.distributed.global_state.client`, as backends.JobHeartbeats and
# Orbax's multihost utilities do: JAX has no public handle); the key names are the C++ file's constants.
NOTICE_KEY = "RECEIVED_PREEMPTION_NOTICE"
COUNTERS_DIR = "PREEMPTION_CURRENT_COUNTER/"
_polls = [0]  # this process's calls to poll_preemption: the number each passes, the same in every process


def poll_preemption() -> bool:
    """True, in every process at the same call, once a notice is agreed. Every process must make the same calls, in
    the same order (each call's number is this process's count of them: it grows across fits, validation passes
    and epoch ends alike, as JAX's sync point needs)."""
    from jax.experimental import multihost_utils

    _polls[0] += 1
    return multihost_utils.reached_preemption_sync_point(_polls[0])


def polls_made() -> int:
    """How many times this process has polled: a training loop notes it when it starts."""
    return _polls[0]


def notice_counters() -> dict[int, int] | None:
    """None while no notice reached the job; else {process: the poll number it had made at the notice}, for the
    processes whose number the store holds yet (all of them once the sync barrier has passed)."""
    from jax._src import distributed

    client = distributed.global_state.client
    if client is None:
        return None
    try:
        client.key_value_try_get(NOTICE_KEY)
    except Exception:  # noqa: BLE001  (not found: no notice yet; jaxlib raises its own error type)
        return None
    # Keys as the store lists them: "PREEMPTION_CURRENT_COUNTER/0" (JAX 0.10.2; the C++ file writes the task's name)
    return {int(re.search(r"(\d+)$", key).group(1)): int(value)
            for key, value in client.key_value_dir_get(COUNTERS_DIR)}


def leave_job(code: int, seconds: float = 10.0) -> None:
    """End this process with `code`, leaving its jax.distributed job first: every process calls this on an agreed
    notice, and jax.distributed.shutdown's barrier lets all leave together. A process that simply exited would end
    the others (the coordination service aborts them, SIGABRT: measured, the job then exited 143, not 42); one
    waits at most `seconds` for the others, then exits anyway."""
    import os
    import threading

    leaving = threading.Thread(target=jax.distributed.shutdown, name="acceltrain-leave-job", daemon=True)
    leaving.start()
    leaving.join(seconds)
    os._exit(code)


def shard_inputs_per_process(distribution) -> None:
    """Each process will feed its own slice of the data: Keras must not slice it again.

    With auto-sharding on, Keras accepts only a tf.data.Dataset in a multi-process job.
    """
    if distribution is not None:
        distribution.auto_shard_dataset = False


def devices_spanned(variable) -> int:
    """How many devices (of all processes) hold a part or a copy of a Keras variable."""
    sharding = getattr(getattr(variable, "value", variable), "sharding", None)
    return len(sharding.device_set) if sharding is not None else 1


def split_over_processes(variables) -> list[str]:
    """The paths of the variables no process holds whole: parts of them are on other processes' devices
    (fsdp or model parallel over hosts), so reading one on the host fails ("spans non-addressable devices")."""
    split = []
    for variable in variables:
        array = getattr(variable, "value", variable)
        if isinstance(array, jax.Array) and not (array.is_fully_addressable or array.is_fully_replicated):
            split.append(getattr(variable, "path", str(variable)))
    return split


def gathering_predictions(model):
    """Inside, `model.predict` returns host arrays of the whole global batch, joined from every process
    (Keras's own predict would fail fetching an array that spans other processes' devices)."""
    from jax.experimental import multihost_utils

    from acceltrain.backends import keras_internals

    def gather(outputs):
        return jax.tree.map(lambda array: multihost_utils.process_allgather(array, tiled=True), outputs)

    return keras_internals.gathering_predictions(model, gather)


def join_shares(arrays, keys):
    """(x, y, sample_weight), each a nest of this process's rows of a stream (None where absent), and `keys`, each row's
    place in the whole stream: the whole set in every process, its rows in that order (streams.stream_to_arrays).
    Gathered over the job's processes on the host (process_allgather), each share padded to the longest first (the
    processes' shares differ by a row or a batch), as bytes: JAX without x64 would make int64 keys and float64 rows
    32-bit (keys of 2**32 and over wrapped, rows changed)."""
    import numpy as np
    from jax.experimental import multihost_utils

    def gather(rows, counts):
        rows = np.ascontiguousarray(rows)
        as_bytes = rows.reshape(len(rows), -1).view(np.uint8)
        padded = np.concatenate([as_bytes, np.zeros((max(counts) - len(rows), as_bytes.shape[1]), np.uint8)])
        every = np.asarray(multihost_utils.process_allgather(padded, tiled=False))
        joined = np.concatenate([every[p, :count] for p, count in enumerate(counts)])
        return np.ascontiguousarray(joined).view(rows.dtype).reshape(-1, *rows.shape[1:])

    counts = [int(c) for c in np.asarray(multihost_utils.process_allgather(np.array([len(keys)], np.int32),
                                                                           tiled=False)).reshape(-1)]
    order = np.argsort(gather(np.asarray(keys, np.int64), counts), kind="stable")
    return jax.tree.map(lambda rows: gather(np.asarray(rows), counts)[order], arrays)
