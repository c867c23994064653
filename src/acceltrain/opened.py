"""The runtimes connect() opened in this process and still open, with the options each was opened with: a call with
the same options gets the open one back (a notebook cell run again), and one with other options opens another, whose
banner names what differs (runtime.py). A `with` block's end gives back only its own call's hold (HOLDS); a runtime
a command holds for a script's whole run (`acceltrain run`: KEPT) is closed by that command alone, the script's
close() giving back its own connect()'s hold."""

import contextlib
import dataclasses
import weakref

OPTIONS = weakref.WeakKeyDictionary()  # each runtime connect() opened → the options it was called with
HOLDS = weakref.WeakKeyDictionary()  # each open runtime → the connect() calls that gave it and hold it still
KEPT = weakref.WeakSet()  # the runtimes a command holds while a script runs under it (held_by_command)


@contextlib.contextmanager
def held_by_command(runtime):
    """`acceltrain run`'s hold on its runtime while the script runs: a script's connect() with run's options gets it
    back, and its close() then gives back that call's hold only (kept_open); at the end, run's own hold is given back
    as a `with` block's is."""
    KEPT.add(runtime)
    try:
        yield runtime
    finally:
        KEPT.discard(runtime)
        runtime.__exit__(None, None, None)


def kept_open(runtime) -> bool:
    """Runtime.close() on a runtime a command holds: the caller's hold given back (a script's connect() took one, if
    any), never the command's. True where it stays open."""
    if runtime not in KEPT:
        return False
    if HOLDS.get(runtime, 1) > 1:
        HOLDS[runtime] -= 1
    return True


def opened_with(options: dict, open_runtimes):
    """The open runtime connect() opened with `options` (None: none is), and the open ones it opened with others,
    each with the options that differ: [(runtime, {option: (there, here)})]."""
    same, others = None, []
    for runtime in list(open_runtimes):
        if runtime not in OPTIONS or runtime not in HOLDS:
            continue
        differ = {name: (there, options[name]) for name, there in OPTIONS[runtime].items()
                  if not same_option(there, options[name])}
        if not differ:
            same = runtime
        else:
            others.append((runtime, differ))
    return same, others


def same_option(there, here) -> bool:
    """A value (a name, a number, a tuple, a Cluster) equal to the other, or an object (a LayoutMap) that is it.
    A Cluster is a dataclass: equal fields, the same job."""
    if there is here:
        return True
    plain = isinstance(there, (str, int, float, tuple)) or dataclasses.is_dataclass(there) and not isinstance(there, type)
    return plain and type(there) is type(here) and there == here


def beside(others) -> str:
    """What the banner says of a new runtime opened while connect() holds others open with other options."""
    said = "; ".join(", ".join(f"{name}={there!r} there, {here!r} here" for name, (there, here) in differ.items())
                     for _, differ in others)
    return (f"opened beside {len(others)} runtime(s) connect() opened with other options, still open in this process "
            f"({said}); the models built in each one's scope keep its layout: runtime.close() the one you no longer use")
