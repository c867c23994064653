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


def _matmuls_and_a_scan(w, x):
    """2·8·3·4 FLOPs of one matmul, then 5 trips of a scan of a 4 × 4 matmul: 192 + 5 · 2·8·4·4 = 1472."""
    import jax

    h = x @ w

    def trip(carry, _):
        return carry @ jax.numpy.eye(4, dtype=carry.dtype), None

    return jax.lax.scan(trip, h, None, length=5)[0]


def test_a_traced_step_counts_each_matmul_and_a_scans_body_once_a_trip():
    import jax

    from acceltrain.backends.jax import compiles

    w, x = jax.ShapeDtypeStruct((3, 4), "float32"), jax.ShapeDtypeStruct((8, 3), "float32")
    assert compiles.traced_matmul_flops(_matmuls_and_a_scan, w, x) == 2 * 8 * 3 * 4 + 5 * 2 * 8 * 4 * 4


def test_a_steps_flops_are_its_traced_matmuls_where_xla_would_count_a_loop_once():
    """The ledger's count (MFU's numerator) on every backend: XLA's cost analysis of this step counts the scan's body
    once (482 FLOPs with its elementwise work, on this CPU), and on the H200 gave none at all."""
    import jax

    from acceltrain.backends.jax import compiles

    step = jax.jit(_matmuls_and_a_scan)
    arguments = (jax.ShapeDtypeStruct((3, 4), "float32"), jax.ShapeDtypeStruct((8, 3), "float32"))
    assert compiles.step_flops(step, arguments) == 2 * 8 * 3 * 4 + 5 * 2 * 8 * 4 * 4
    assert step.lower(*arguments).cost_analysis()["flops"] < 2 * 8 * 3 * 4 + 5 * 2 * 8 * 4 * 4
