"""Keras's callbacks as acceltrain joins them: a callback class marked safe for Keras's callback thread, and a call's
callbacks (a list, or a keras.callbacks.CallbackList the caller built) with acceltrain's own added
(interception.Call.with_callback reads these through interception.CALLBACK_LISTS: it imports no Keras)."""

import keras

from acceltrain.backends.interception import CALLBACK_LISTS


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
