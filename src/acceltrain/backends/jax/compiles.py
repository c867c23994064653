"""JAX's compiles: the persistent compilation cache connect() turns on, and the time ledger's view of compiling
(acceltrain/ledger.py): JAX's own monitoring events, the cache's hits and misses, a step's FLOPs."""

import threading

import jax


def enable_compilation_cache() -> None:
    """Keep compiled programs on disk, so the second run of the same job skips compilation.

    Must run before JAX's first compile: JAX decides once, at its first compile, whether it caches.
    The folder is `backends.jax_compilation_cache_dir()`, unless the user set one in jax.config.
    Every program is cached, not only those over JAX's default 1 s (on a CPU most of a run's compiles
    are shorter; BENCHMARKS.md, epoch-speed, measures the cut), unless the user set their own minimum
    (JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS or jax.config), which is kept.
    ACCELTRAIN_COMPILATION_CACHE=0 turns it off.
    """
    import os

    from acceltrain.backends import jax_compilation_cache_dir

    folder = jax_compilation_cache_dir()
    if folder is None:
        return
    if jax.config.jax_compilation_cache_dir is None:
        jax.config.update("jax_compilation_cache_dir", folder)
    if _user_min_compile_time(os.environ, jax.config.jax_persistent_cache_min_compile_time_secs) is None:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


# JAX's own default for jax_persistent_cache_min_compile_time_secs: a different value was set by someone.
JAX_DEFAULT_MIN_COMPILE_TIME_SECS = 1.0


def _user_min_compile_time(env, configured: float) -> float | None:
    """The user's own minimum compile time for caching, if they set one (env or jax.config); else None."""
    if env.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS") is not None or configured != JAX_DEFAULT_MIN_COMPILE_TIME_SECS:
        return configured
    return None


# --- The time ledger's view of JAX (acceltrain/ledger.py) ------------------------------------------

# JAX's monitoring events (jax/_src/dispatch.py, pjit.py, interpreters/pxla.py, compiler.py, JAX 0.10.2). Each
# compile event is a time span; a persistent-cache hit is inside the backend compile's span (its read).
COMPILE_SPANS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                 "/jax/core/compile/backend_compile_duration")
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
CACHE_EVENTS = {"/jax/compilation_cache/compile_requests_use_cache": "cache_requests",
                "/jax/compilation_cache/cache_hits": "cache_hits"}


def watch_compiles(timeline):
    """Book each compile of this thread (the one running the training loop) into `timeline` as compilation, from
    JAX's own monitoring events, and count the programs, the persistent cache's requests and hits, and the seconds
    of backend compiles whose program was not in the cache (`compile_seconds_missed`: what a second run saves).
    Nested spans (a function traced inside another's trace) overlap, and the ledger books an instant once. Under
    -v each program is listed as it compiles: its name, why (the acceltrain step and the Keras call that asked for
    it, from the stack), its seconds, and whether the persistent cache held it. Returns the function that stops it.
    Compiles of other threads (a checkpoint writer's) overlap the steps: left out."""
    from acceltrain import log

    thread = threading.get_ident()
    program = {"requested": False, "hit": False}  # the backend compile in progress: JAX asks the cache, then ends it

    def span(event, start, end, fun_name=None, **_):
        if event not in COMPILE_SPANS or threading.get_ident() != thread:
            return
        timeline.add("compilation", start, end)
        if event == BACKEND_COMPILE:
            timeline.count("compiles")
            missed = program["requested"] and not program["hit"]
            if missed:
                timeline.count("compile_seconds_missed", end - start)
            if log.is_verbose():
                cache = "a persistent-cache hit" if program["hit"] else ("compiled, cached now" if missed else
                                                                         "compiled, not cached")
                log.debug(f"program {fun_name or '?'}: {end - start:.2f} s, {cache}; for {why_compiled()}")
            program.update(requested=False, hit=False)

    def counted(event, **_):
        if event in CACHE_EVENTS and threading.get_ident() == thread:
            timeline.count(CACHE_EVENTS[event])
            program["hit" if event.endswith("cache_hits") else "requested"] = True

    jax.monitoring.register_event_time_span_listener(span)
    jax.monitoring.register_event_listener(counted)
    off_by = _cache_off_by()
    if off_by is not None:
        timeline.note("cache_off_by", off_by)

    def stop():
        jax.monitoring.unregister_event_time_span_listener(span)
        jax.monitoring.unregister_event_listener(counted)

    return stop


def why_compiled(stack=None) -> str:
    """Who asked for the program compiling now, from the stack: the innermost acceltrain function (its module and
    line) and the innermost Keras one; 'a call outside acceltrain and Keras' where neither is on the stack."""
    import traceback
    from pathlib import Path

    frames = traceback.extract_stack() if stack is None else stack
    ours = keras = None
    for frame in reversed(frames):
        path = Path(frame.filename).as_posix()
        if ours is None and "/acceltrain/" in path and not path.endswith("backends/jax/compiles.py"):
            ours = f"acceltrain {path.rsplit('/acceltrain/', 1)[1]}:{frame.lineno} {frame.name}"
        if keras is None and "/keras/" in path:
            keras = f"Keras {path.rsplit('/keras/', 1)[1]} {frame.name}"
    said = " ← ".join(part for part in (keras, ours) if part)
    return said or "a call outside acceltrain and Keras"


def _cache_off_by() -> str | None:
    """The setting that turned JAX's persistent compilation cache off, where one did (the ledger's advice names it
    and nothing else): jax.config's switch, or ACCELTRAIN_COMPILATION_CACHE=0 (enable_compilation_cache then sets
    no folder)."""
    import os

    if not jax.config.jax_enable_compilation_cache:
        return "jax_enable_compilation_cache=False"
    if jax.config.jax_compilation_cache_dir is None and os.environ.get("ACCELTRAIN_COMPILATION_CACHE") == "0":
        return "ACCELTRAIN_COMPILATION_CACHE=0"
    return None


def step_flops(jitted_step, arguments) -> float | None:
    """FLOPs of one call of `jitted_step` (the whole step, every device's share together) with arguments shaped as
    `arguments` (arrays or their jax.ShapeDtypeStruct): its matmuls and convolutions as traced (traced_matmul_flops),
    the count MFU divides. Not XLA's cost analysis: on a GPU it counts none of the matmuls it hands to cuBLAS (on an
    H200 the lowered step gave no count at all, and the compiled one 1.8e11 FLOPs for a step whose matmuls hold
    1.5e13), and on every backend it counts a loop's body once, not once a trip (an LSTM's scan). None where the
    step cannot be traced again."""
    try:
        flops = traced_matmul_flops(jitted_step, *arguments)
    except Exception:  # noqa: BLE001  (no count is an answer: the ledger then reports none)
        return None
    return float(flops) if flops > 0 else None


def traced_matmul_flops(function, *arguments) -> int:
    """2 x the multiply-adds of every dot_general and convolution `function` runs on `arguments` (arrays or
    jax.ShapeDtypeStruct), counted from its jaxpr, whatever the backend: a scan's body times its length, a loop's
    body once (its trip count is not known before it runs). Elementwise work is left out, as MFU counts it."""
    return _program_flops(jax.make_jaxpr(function)(*arguments).jaxpr)


def _program_flops(jaxpr) -> int:
    total = 0
    for eqn in jaxpr.eqns:
        times = eqn.params.get("length", 1) if eqn.primitive.name == "scan" else 1
        total += _matmul_flops(eqn) + times * sum(_program_flops(inner) for inner in sub_programs(eqn))
    return total


def sub_programs(eqn):
    """The programs an equation runs inside it (jit, scan, custom_vjp, checkpoint ...), each a Jaxpr."""
    for value in eqn.params.values():
        for sub in value if isinstance(value, (list, tuple)) else (value,):
            inner = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr's program, or a Jaxpr itself
            if hasattr(inner, "eqns"):
                yield inner


def _matmul_flops(eqn) -> int:
    import math

    name = eqn.primitive.name
    if name == "dot_general":
        (lhs_contracting, _), _ = eqn.params["dimension_numbers"]
        lhs = eqn.invars[0].aval.shape
        return 2 * math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[d] for d in lhs_contracting)
    if name == "conv_general_dilated":
        rhs = eqn.invars[1].aval.shape  # the kernel: out channels x in channels/groups x window
        out_channels_dim = eqn.params["dimension_numbers"].rhs_spec[0]
        return 2 * math.prod(eqn.outvars[0].aval.shape) * math.prod(rhs) // rhs[out_channels_dim]
    return 0


def shapes_of(tree):
    """The jax.ShapeDtypeStruct of each array of a nest (shape, dtype, sharding): what `step_flops` lowers with,
    kept before the step's arguments are donated. A batch's indices standing for it (resident.py) give the batch's."""
    if hasattr(tree, "gathered"):
        tree = jax.eval_shape(tree.gathered)

    def shape(leaf):
        if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
            return leaf
        sharding = getattr(leaf, "sharding", None) if isinstance(leaf, jax.Array) else None
        weak = bool(getattr(getattr(leaf, "aval", None), "weak_type", False))
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding, weak_type=weak)

    return jax.tree.map(shape, tree)
