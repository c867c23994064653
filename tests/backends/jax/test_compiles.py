"""backends/jax/compiles.py: the time ledger's view of JAX's compiles, and the persistent cache."""

import contextlib
import json
import re

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


# --- Every compiled program of a run, listed under -v -----------------------------------------------

# The programs `acceltrain train` compiles on the default job's own shape, small: 3 epochs of 2,160 samples at
# batch 240 (9 steps, none left out; the steps an execution the clock sizes: 2 in the first epoch, then to the
# epoch's end), validation split 0.1 (one batch of 240), checkpoints 'auto', the test set's 600 (2 batches of 240 and
# one of 120). Listed under -v: the weights' initial values in one program and the optimizer's in another
# (keras_internals.variables_initialized_at_once; 13 and 5 op by op before), 2 eager conversions (the optimizer's
# iteration counter, a zeros), the loop of many steps a dispatch (one for every count: resident.py's buffer), a test
# step per batch shape (240, 120); the metrics' results come from the last step (3 eager programs before). The README's
# full job (20 epochs, 54,000 samples at batch 1,200) compiles the same 7. Issue 43's bound: at most 8 (9 on a quiet
# machine, 19 on a loaded one, before the loop took one buffer for every count and validation's state was committed).
PROGRAMS_OF_THE_DEFAULT_JOB = 8
THE_DEFAULT_JOB_SMALL = ("--epochs", 3, "--batch-size", 240)


def _programs(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("acceltrain: program ")]


def _names(programs: list[str]) -> list[str]:
    return [line.split()[2].rstrip(":") for line in programs]


def test_the_default_job_compiles_at_most_8_programs_listed_under_verbose_and_a_rerun_finds_each_in_the_cache(
        tmp_path, small_mnist, cli):
    runs = []
    for name in ("cold", "warm"):
        done = cli("train", "-v", "--data", small_mnist, *THE_DEFAULT_JOB_SMALL, "--out", tmp_path / name,
                   JAX_COMPILATION_CACHE_DIR=str(tmp_path / "cache"))
        assert done.returncode == 0, done.stderr[-3000:]
        metrics = json.loads((tmp_path / name / "metrics.json").read_text())
        runs.append((_programs(done.stderr), metrics["ledger"]))
    (cold, cold_ledger), (warm, _) = runs
    names = _names(cold)
    # every program the ledger counted is listed, with its name, seconds, cache and who asked for it
    assert len(cold) == cold_ledger["compiles"] <= PROGRAMS_OF_THE_DEFAULT_JOB, "\n".join(cold)
    assert names.count("jit(loop)") == 1 and names.count("jit(test_step)") == 2, "\n".join(cold)  # one a shape
    pattern = re.compile(r"acceltrain: program jit\(\w+\): \d+\.\d\d s, (a persistent-cache hit|compiled, cached now"
                         r"|compiled, not cached); for .*(Keras src/|acceltrain )")
    assert all(pattern.match(line) for line in cold + warm), cold + warm
    assert any("jit(loop)" in line and "Keras src/backend/jax/trainer.py fit" in line for line in cold)
    assert sum("compiled, cached now" in line for line in cold) >= 2  # a fresh cache: the steps compiled, kept
    # the same job again: every program it needs comes from the persistent cache, none compiled again
    assert _names(warm) == names and all("a persistent-cache hit" in line for line in warm), "\n".join(warm)
    quiet = cli("train", "--data", small_mnist, "--epochs", 1, "--batch-size", 240, "--out", tmp_path / "quiet",
                JAX_COMPILATION_CACHE_DIR=str(tmp_path / "cache"))
    assert quiet.returncode == 0 and not _programs(quiet.stderr)  # the default verbosity lists none


def test_why_a_program_compiled_names_the_keras_call_and_the_acceltrain_step_that_asked():
    import traceback

    from acceltrain.backends.jax import compiles

    def frame(path, line, name):
        return traceback.FrameSummary(path, line, name)

    stack = [frame("/x/lib/acceltrain/commands/train.py", 10, "train_and_evaluate"),
             frame("/x/lib/acceltrain/backends/keras_internals.py", 155, "__call__"),
             frame("/x/site-packages/keras/src/backend/jax/trainer.py", 257, "iterator_step"),
             frame("/x/site-packages/jax/_src/pjit.py", 1, "cache_miss"),
             frame("/x/lib/acceltrain/backends/jax/compiles.py", 80, "span")]
    assert compiles.why_compiled(stack) == ("Keras src/backend/jax/trainer.py iterator_step ← acceltrain "
                                            "backends/keras_internals.py:155 __call__")
    assert compiles.why_compiled(stack[3:]) == "a call outside acceltrain and Keras"


def test_train_on_eight_simulated_devices_compiles_the_programs_of_one(tmp_path, small_mnist, cli):
    """Orbax's replica-parallel save sliced each replicated array once per replica, one program per shape and slice
    (72 of 80 programs on 8 devices): a job of one process saves each whole (sharded_checkpoint.py), and the
    checkpoint it wrote is there."""
    done = cli("train", "-v", "--simulate-devices", 8, "--data", small_mnist, "--epochs", 1, "--batch-size", 600,
               "--out", tmp_path / "out", JAX_COMPILATION_CACHE_DIR=str(tmp_path / "cache"))
    assert done.returncode == 0, done.stderr[-3000:]
    programs = _programs(done.stderr)
    assert len(programs) <= PROGRAMS_OF_THE_DEFAULT_JOB and not any("jit(slice)" in line for line in programs), programs
    assert any(path.name.startswith("epoch-0001") for path in (tmp_path / "out" / "checkpoints").iterdir())
