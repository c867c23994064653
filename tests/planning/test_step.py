"""planning/step.py: what a plan's compiles leave behind."""

from tests import support

_PLAN_FIRST = """
import jax
from acceltrain.planning import step
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # every program cached, as connect() sets
requests = []
jax.monitoring.register_event_listener(
    lambda event, **_: requests.append(event) if event == "/jax/compilation_cache/compile_requests_use_cache" else None)
with step._no_persistent_cache():
    jax.jit(lambda x: x + 1)(1.0)  # the process's first compile: a plan's (as Runtime.build weighs under --device-memory)
jax.jit(lambda x: x * 3)(2.0)  # the run's own
print(len(requests))
"""


def test_a_plan_compiled_first_leaves_the_persistent_cache_on_for_the_run(tmp_path):
    """Issue 31: JAX decides once, at its first compile, whether it uses the cache; when that was a plan's (the cache
    off), every compile of the run missed the cache: --device-memory runs compiled 33 s on every rerun."""
    done = support.python("-c", _PLAN_FIRST, timeout=120, JAX_COMPILATION_CACHE_DIR=str(tmp_path / "cache"))
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip().splitlines()[-1]) >= 1  # the run's compile asked the cache
