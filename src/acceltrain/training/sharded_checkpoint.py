"""Checkpoints on JAX with Orbax: each process writes its own shards, in the background, atomically.

The same folder shape and interface as `checkpoint.Checkpoints` (the .weights.h5 checkpoints TensorFlow
keeps): `checkpoints/epoch-0003-step-00025/` holds `pytree/` (Keras's state tree: weights, optimizer
and seed-generator state, written by Orbax as per-process tensorstore files) and `state/` (the
`checkpoint.State` as JSON, written by process 0).

- Sharded: every process calls save; Orbax writes only the shards its devices hold, so no host ever
  gathers the whole model.
- Asynchronous: `save` returns once the arrays are copied to host memory; the files are written by a
  background thread while training goes on. The next save, `restore_latest` and `close` wait for it.
- Atomic: Orbax writes `NAME.orbax-checkpoint-tmp-*` and renames it when every process is done, so a
  kill at any instant leaves the previous checkpoint whole; a checkpoint that does not load (a
  truncated file) is reported and skipped for the one before.
- Another mesh: arrays are restored straight into the layouts of the model being resumed (the target
  shardings of its variables), so a run saved sharded over 8 devices resumes on 4, or on 1.

Why not `keras.callbacks.OrbaxCheckpoint`: it numbers checkpoints by batches seen and keeps no state
of ours (epoch, step within it, seed, history), hooks `on_train_batch_end` (which makes Keras wait for
every step's metrics on the host), and restores (through `load_weights`) with the saved layouts when no
distribution is active, which fails on a machine with fewer devices. The state tree it saves
(`model.get_state_tree`) is the one saved here.
"""

import contextlib
import json
import shutil
import threading
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from acceltrain import log
from acceltrain.errors import AcceltrainError, positive_int
from acceltrain.training import checkpoint
from acceltrain.training.checkpoint import State

PYTREE, STATE = "pytree", "state"
_TMP_MARK = ".orbax-checkpoint-tmp"
_PRUNED = ".pruned-"  # an old checkpoint renamed out of the listing, its files deleted in the background


class ShardedCheckpoints:
    """The checkpoints folder of one run on JAX: save (in the background), list, restore the newest good one."""

    def __init__(self, folder: Path, keep: int = 2):
        positive_int(keep, "keep_checkpoints")
        self.folder = Path(folder).absolute()  # Orbax wants absolute paths
        self.keep = keep
        self._checkpointer = None
        self._last_saved: Path | None = None  # this run's newest save: pruning never reaches past it
        self._pruning: threading.Thread | None = None
        self._first_write: list[float] = []  # this run's first save: its start, then when its files were complete

    # --- Writing ------------------------------------------------------------------------------------

    def save(self, model, state: State) -> Path:
        """Start writing a checkpoint; returns once the arrays are in host memory. Every process calls it."""
        import orbax.checkpoint as ocp

        final = self.folder / f"epoch-{state.epoch:04d}-step-{state.step:05d}"
        self._finish_and_prune(keep=self.keep - 1)  # the previous write first: one in flight at a time
        if self._is_primary():
            self.folder.mkdir(parents=True, exist_ok=True)
        if not self._first_write:
            self._first_write.append(time.perf_counter())
        tree = _saved_tree(model)
        state.variables = checkpoint.variable_signature(model)
        try:
            with _whole_arrays_in_one_process():
                self._writer().save(final, ocp.args.Composite(**{
                    PYTREE: ocp.args.StandardSave(tree), STATE: ocp.args.JsonSave(asdict(state))}), force=True)
        except OSError as error:
            raise AcceltrainError(
                f"Could not write the checkpoint {final} ({error.strerror or error}). The previous checkpoint "
                "is intact. Free some disk space or pass another --out, then resume with --resume."
            ) from None
        self._last_saved = final
        return final

    def open(self) -> None:
        """Import Orbax and start its writer now, before training (a quarter of a second on a CPU), rather than in the
        first checkpoint's epoch."""
        self._writer()

    def first_write_seconds(self) -> float | None:
        """How long this run's first checkpoint took to write, from the save call until Orbax had finished its files
        in the background (waiting for them if it has not); None before it. An upper bound of what it cost
        training: on an accelerator, the background write runs beside the steps."""
        if not self._first_write:
            return None
        if len(self._first_write) == 1:
            self._finish_and_prune(keep=self.keep)
            if len(self._first_write) == 1:  # the write failed: said by _finish_and_prune; timed to now
                self._first_write.append(time.perf_counter())
        return self._first_write[1] - self._first_write[0]

    def _written(self) -> None:
        """Orbax's post-finalization callback: the files of the save in flight are complete."""
        if len(self._first_write) == 1:
            self._first_write.append(time.perf_counter())

    @staticmethod
    def agree(value: int) -> int:
        """`value` as every process of the job takes it: process 0's, so that all checkpoint at the same epochs."""
        import jax

        if jax.process_count() == 1:
            return value
        from jax.experimental import multihost_utils

        return int(multihost_utils.broadcast_one_to_all(np.int32(value)))

    def close(self) -> None:
        """Wait for the write in flight, then keep the newest `keep`. Call before the process exits."""
        if self._checkpointer is not None:
            self._finish_and_prune(keep=self.keep)
            self._checkpointer.close()
            self._checkpointer = None
        self._wait_for_pruning()

    def _finish_and_prune(self, keep: int) -> None:
        if self._checkpointer is None:
            return
        try:
            self._checkpointer.wait_until_finished()
        except Exception as error:  # a background write failed: say so; the previous checkpoint stands
            log.warn(f"a checkpoint could not be written ({error}); the previous one is intact")
        if self._is_primary() and self._last_saved is not None:
            self._prune(checkpoint.to_prune(self.list(), self._last_saved, keep))

    def _prune(self, old: list[Path]) -> None:
        """Rename the old checkpoints out of the listing at once, and delete their files in the background: Orbax
        writes dozens of files a checkpoint, and deleting them in the loop held training at every save."""
        self._wait_for_pruning()
        renamed = []
        for folder in old:
            target = folder.with_name(_PRUNED + folder.name)
            try:
                folder.rename(target)
                renamed.append(target)
            except OSError:
                shutil.rmtree(folder, ignore_errors=True)
        if renamed:
            self._pruning = threading.Thread(target=lambda: [shutil.rmtree(f, ignore_errors=True) for f in renamed],
                                             name="acceltrain-prune-checkpoints", daemon=True)
            self._pruning.start()

    def _wait_for_pruning(self) -> None:
        if self._pruning is not None:
            self._pruning.join()
            self._pruning = None

    def _writer(self):
        if self._checkpointer is None:
            import orbax.checkpoint as ocp

            self._remove_unfinished()
            self._checkpointer = ocp.AsyncCheckpointer(
                ocp.CompositeCheckpointHandler(), async_options=ocp.AsyncOptions(post_finalization_callback=self._written))
        return self._checkpointer

    def _remove_unfinished(self) -> None:
        """Folders a killed run left half written or half deleted: never listed, removed before this run writes."""
        if self._is_primary() and self.folder.is_dir():
            for path in self.folder.iterdir():
                if _TMP_MARK in path.name or path.name.startswith(_PRUNED):
                    shutil.rmtree(path, ignore_errors=True)

    # --- Reading ------------------------------------------------------------------------------------

    def list(self) -> list[Path]:
        """Complete checkpoint folders, oldest first."""
        return _list(self.folder)

    def latest(self) -> tuple[Path, State] | None:
        """The newest checkpoint whose state reads back; its arrays are checked when restored."""
        return checkpoint.newest_readable(self.list(), _read_state)

    def restore_latest(self, model) -> tuple[Path, State] | None:
        """Restore the newest checkpoint that loads whole into `model`; damaged ones are reported and skipped.
        Raises UsageError when every one is damaged or another model wrote them (checkpoint.restore_newest)."""
        self._finish_and_prune(keep=self.keep)
        return checkpoint.restore_newest(self.folder, self.list(), _read_state, restore, model)

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def preempted_at(self, step: int) -> bool:
        """In a multi-process job: True, on every process at the same `step`, once any of them got SIGTERM.

        JAX's coordination service catches SIGTERM in each process (jax.distributed installs the
        handler) and picks the first step all processes can still stop at. `step` must grow by at
        least one between calls, and every process must make the same calls.
        """
        import jax

        if jax.process_count() == 1:
            return False
        from jax.experimental import multihost_utils

        return multihost_utils.reached_preemption_sync_point(step)

    @staticmethod
    def _is_primary() -> bool:
        import jax

        return jax.process_index() == 0


def restore(model, path: Path) -> None:
    """Load a checkpoint into `model`, each array straight into the layout of the variable it fills.

    The layouts are the model's own (its distribution's), not the saved ones, so this works on another
    mesh or device count. A folder from the .weights.h5 format (an older run) loads through Keras.
    """
    if (path / checkpoint.WEIGHTS).exists():
        checkpoint.restore(model, path)
        return
    import jax
    import orbax.checkpoint as ocp

    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    variables = _saved_variables(model)
    fallback = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    abstract = jax.tree_util.tree_map(
        lambda v: jax.ShapeDtypeStruct(v.shape, v.value.dtype, sharding=getattr(v.value, "sharding", fallback)),
        variables)
    with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as reader:
        restored = reader.restore(path, ocp.args.Composite(**{PYTREE: ocp.args.StandardRestore(abstract)}))
    for variable, value in zip(jax.tree_util.tree_leaves(variables), jax.tree_util.tree_leaves(restored[PYTREE])):
        variable.assign(value)


_saved_variables = checkpoint.saved_variables


@contextlib.contextmanager
def _whole_arrays_in_one_process():
    """Inside, in a job of one process, Orbax saves each replicated array whole from one replica, not in slices
    written by each replica in parallel (its default on CPU and TPU): that split compiled one slice program per array
    shape and replica, 72 of the 80 programs of a small job on 8 simulated devices, and gains nothing where one host
    writes every replica's slice. A job of several processes keeps Orbax's default: there it spreads the writing
    over the hosts. Orbax's handler for jax.Array is put back on exit (its save has taken the slices by then)."""
    import jax
    from orbax.checkpoint import type_handlers

    if jax.process_count() > 1:
        yield
        return
    orbaxs = type_handlers.get_type_handler(jax.Array)
    type_handlers.register_type_handler(jax.Array, type_handlers.ArrayHandler(use_replica_parallel=False),
                                        override=True)
    try:
        yield
    finally:
        type_handlers.register_type_handler(jax.Array, orbaxs, override=True)


def _saved_tree(model) -> dict:
    return {part: [variable.value for variable in variables] for part, variables in _saved_variables(model).items()}


def _read_state(folder: Path) -> State:
    if (folder / checkpoint.STATE).exists():  # the .weights.h5 format
        return checkpoint.read_state(folder)
    return State(**json.loads((folder / STATE / "metadata").read_text()))  # the file Orbax's JsonSave writes


def _list(folder: Path) -> list[Path]:
    return checkpoint.Checkpoints(folder).list()

