"""Keras's callbacks as acceltrain joins them: a callback class marked safe for Keras's callback thread, and a call's
callbacks (a list, or a keras.callbacks.CallbackList the caller built) with acceltrain's own added
(interception.Call.with_callback reads these through interception.CALLBACK_LISTS: it imports no Keras)."""

import contextlib

import keras

from acceltrain.backends.interception import CALLBACK_LISTS, patched


def async_safe(callback_class):
    """Mark a Callback class safe to run from Keras's callback thread.

    Relies on: CallbackList._configure_async_dispatch dispatches batch-end callbacks on a thread pool when
    every callback has `async_safe = True`; any callback without it makes Keras wait on the host for each
    step's metrics.
    """
    callback_class.async_safe = True
    return callback_class


def callbacks_added(given, model, first=(), last=()):
    """A call's `callbacks` with acceltrain's `first` before the caller's and `last` after them: a list for a list
    (or None), and for a keras.callbacks.CallbackList the caller built a new one over the same callbacks (its History
    and progress bar among them, its parameters and model; acceltrain's given `model` and those parameters), Keras's
    async dispatch decided over them all as for a list. None for a subclass of CallbackList: its own methods stand,
    nothing is added.

    Relies on: fit/evaluate/predict use a CallbackList they are given as it is (no set_model, no set_params: its
    maker's); CallbackList keeps its callbacks in `callbacks` (History and ProgbarLogger in it once added), its
    parameters in `params`, its model in `_model` (Callback.model syncs the JAX state on reading)."""
    if given is None or isinstance(given, (list, tuple)):
        return [*first, *(given or ()), *last]
    if type(given) is not keras.callbacks.CallbackList:
        return None
    made = keras.callbacks.CallbackList([*first, *given.callbacks, *last], model=given._model, **(given.params or {}))
    made.params = given.params  # as its maker set them
    for callback in (*first, *last):
        callback.set_model(model)
        callback.set_params(given.params)
    return made


def callbacks_in(given) -> list:
    """The callbacks of a call's `callbacks` (a list, None or a keras.callbacks.CallbackList), as Keras calls them.

    Relies on: CallbackList keeps its callbacks in `callbacks`."""
    if isinstance(given, keras.callbacks.CallbackList):
        return list(given.callbacks)
    return list(given or ())


CALLBACK_LISTS.update(read=callbacks_in, add=callbacks_added)


def batch_hooks_idle(callback) -> bool:
    """Whether a callback's batch hooks do nothing in this fit: keras.callbacks.ModelCheckpoint and BackupAndRestore
    saving at each epoch's end (`save_freq='epoch'`, their default). They override on_train_batch_end, so they would
    count as needing each batch, and a fit on device data with either, most scripts' callbacks, would run one
    execution of steps_per_execution steps at a time instead of its epoch in a few dispatches.

    Relies on: their on_train_batch_end saving only through _should_save_on_batch, which returns False at once when
    `save_freq == "epoch"` (no count kept); BackupAndRestore's on_train_batch_begin unset."""
    idle_when_epochwise = (keras.callbacks.ModelCheckpoint, keras.callbacks.BackupAndRestore)
    return type(callback) in idle_when_epochwise and getattr(callback, "save_freq", None) == "epoch" and not any(
        name in vars(callback) for name in ("on_batch_begin", "on_batch_end", "on_train_batch_begin",
                                            "on_train_batch_end"))


@contextlib.contextmanager
def backups_deleted_by_any_process():
    """Inside, keras.callbacks.BackupAndRestore's deletion of its backup at a finished fit's end takes a backup another
    process of the job deleted first as deleted: under `acceltrain launch` every process runs the script's callback
    over one folder (one machine, a shared disk), and the second to delete it raised "FileNotFoundError: [Errno 2] No
    such file or directory: 'latest.weights.h5'" after training had finished. Each process still deletes its own (a
    host's own disk keeps no stale backup to restore from on a rerun). A remote path (gs://...) is left as Keras does it.

    Relies on: BackupAndRestore.on_train_end deleting `backup_dir` with file_utils.rmtree when `delete_checkpoint`,
    which raises FileNotFoundError when a file or the folder goes while it walks it."""
    import shutil

    def tolerant(_, keras_own):
        def on_train_end(callback, logs=None):
            try:
                return keras_own(callback, logs)
            except FileNotFoundError:
                if "://" in str(callback.backup_dir):
                    raise
                shutil.rmtree(callback.backup_dir, ignore_errors=True)  # another process's deletion under way
        return on_train_end

    with patched(keras.callbacks.BackupAndRestore, ["on_train_end"], tolerant):
        yield
