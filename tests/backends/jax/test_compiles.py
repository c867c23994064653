"""backends/jax/compiles.py: the time ledger's view of JAX's compiles, and the persistent cache."""

import contextlib

import numpy as np


def test_watch_compiles_books_jaxs_own_compile_events_and_the_caches(runtime):
    """The event names of JAX 0.10.2 (backends/jax.py COMPILE_SPANS, CACHE_EVENTS) still fire: a function never
    compiled before is traced, lowered and compiled (compilation), the persistent cache asked and missed; the same
    program again, in a new function, is found in it."""
    import uuid

    import jax

    from acceltrain import ledger
    from acceltrain.backends import jax as backend

    assert jax.config.jax_compilation_cache_dir  # connect() turned the persistent cache on
    constant = float(uuid.uuid4().int % 10**9)  # a program no earlier run compiled
    timeline = ledger.Timeline(backend.watch_compiles)
    with timeline.window() as cold:
        jax.jit(lambda x: x * constant + 1)(np.ones(3, np.float32)).block_until_ready()
    with timeline.window() as warm:
        jax.jit(lambda x: x * constant + 1)(np.ones(3, np.float32)).block_until_ready()
    assert cold.ledger.parts["compilation"] > 0 and cold.ledger.facts["compiles"] >= 1
    assert cold.ledger.facts["cache_requests"] >= 1 and cold.ledger.facts["compile_seconds_missed"] > 0
    assert warm.ledger.facts.get("cache_hits", 0) >= 1 and not warm.ledger.facts.get("compile_seconds_missed")
    with timeline.window() as stopped:  # the listeners went with the windows: one watch at a time, not one a window
        pass
    assert stopped.ledger.facts == {}


def test_the_cache_is_said_off_only_by_the_setting_that_turned_it_off(monkeypatch):
    """The ledger advises undoing a setting only where the backend noted one (issue 31: it advised unsetting an
    ACCELTRAIN_COMPILATION_CACHE=0 nobody had set)."""
    from acceltrain.backends.jax import compiles

    monkeypatch.delenv("ACCELTRAIN_COMPILATION_CACHE", raising=False)
    assert compiles._cache_off_by() is None  # on, or off by nothing the user set: nothing to undo
    with _jax_config("jax_enable_compilation_cache", False):
        assert compiles._cache_off_by() == "jax_enable_compilation_cache=False"
    monkeypatch.setenv("ACCELTRAIN_COMPILATION_CACHE", "0")  # enable_compilation_cache then sets no folder
    with _jax_config("jax_compilation_cache_dir", None):
        assert compiles._cache_off_by() == "ACCELTRAIN_COMPILATION_CACHE=0"


@contextlib.contextmanager
def _jax_config(name: str, value):
    """JAX's setting `name` at `value` for the block, given back after it."""
    import jax

    was = getattr(jax.config, name)
    jax.config.update(name, value)
    try:
        yield
    finally:
        jax.config.update(name, was)
