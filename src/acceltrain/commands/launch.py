"""`acceltrain launch --processes N SCRIPT.py`: one jax.distributed job of N processes on this machine.

Each process is `acceltrain run SCRIPT.py` told its place through ACCELTRAIN_* variables (the coordinator
is process 0 at 127.0.0.1 on a free port), so the multi-host path runs, and is tested, on one machine.
The launcher prefixes each process's lines with its index, and when one process fails it stops the
others: a job with a missing process would otherwise wait in its next collective until JAX's heartbeat
gives up, or forever in the first one.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from acceltrain import backends, cluster, decisions, log
from acceltrain.errors import UsageError

POLL_SECONDS = 0.2
STOP_GRACE_SECONDS = 5.0  # after SIGTERM, before SIGKILL


def launch(script: str, argv=(), *, processes: int, simulate_devices: int | None = None,
           backend: str | None = None, distribution: str = "auto") -> int:
    """Run SCRIPT in `processes` cooperating processes; returns 0 if all succeed, else 1 (2: bad usage)."""
    # 1. Everything that can be wrong is refused before a process starts.
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise UsageError(f"Received --processes {processes!r}. Expected a whole number of at least 1, e.g. 2.")
    if not Path(script).is_file():
        raise UsageError(f"Received script {script!r}, which is not a file. Pass the path of a Python script.")
    backend_name, _ = decisions.choose_backend(backend, None, os.environ.get("KERAS_BACKEND"), backends.jax_importable())
    if processes > 1:
        flags = {"coordinator": "127.0.0.1:0", "num_processes": processes, "process_id": 0}
        cluster.choose_processes(backend_name, flags, {}, False)  # refuses TensorFlow with its reason

    # 2. Start the processes: the same command, each told its index.
    coordinator = f"127.0.0.1:{_free_port()}"
    command = [sys.executable, "-m", "acceltrain", "run", "--backend", backend_name, "--distribution", distribution]
    if simulate_devices is not None:
        command += ["--simulate-devices", str(simulate_devices)]
    command += [script, *argv]
    log.info(f"launching {processes} processes of {Path(script).name}, coordinator {coordinator}")
    children = [subprocess.Popen(command, env=_child_env(coordinator, processes, index), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
                for index in range(processes)]
    writing = threading.Lock()  # one line at a time on the launcher's terminal, whichever process it is from
    pumps = [threading.Thread(target=_prefix_lines, args=(stream, target, index, writing), daemon=True)
             for index, child in enumerate(children)
             for stream, target in ((child.stdout, sys.stdout), (child.stderr, sys.stderr))]
    for pump in pumps:
        pump.start()

    # 3. Watch: the first failure stops the rest.
    try:
        code = _watch(children)
    except KeyboardInterrupt:
        _stop(children)
        raise
    finally:
        for pump in pumps:
            pump.join(timeout=STOP_GRACE_SECONDS)
    return code


def _watch(children) -> int:
    while True:
        codes = [child.poll() for child in children]
        failed = [(index, code) for index, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            index, code = failed[0]
            running = [i for i, c in enumerate(codes) if c is None]
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            if running:
                log.warn(f"process {index} {how}; stopping the other {len(running)} running process(es) "
                         f"{running} so the job does not hang waiting for it")
            else:
                log.warn(f"process {index} {how}; no other process was still running")
            _stop(children)
            return 2 if code == 2 else 1
        if all(code == 0 for code in codes):
            return 0
        time.sleep(POLL_SECONDS)


def _stop(children) -> None:
    """SIGTERM, then SIGKILL after a grace period, to every child still running."""
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for child in children:
        try:
            child.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _child_env(coordinator: str, processes: int, index: int) -> dict:
    env = dict(os.environ)
    env.update({cluster.ENV_COORDINATOR: coordinator, cluster.ENV_NUM_PROCESSES: str(processes),
                cluster.ENV_PROCESS_ID: str(index), "PYTHONUNBUFFERED": "1"})
    # The children import this same acceltrain, wherever it was imported from (a checkout or site-packages).
    source_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source_root, env.get("PYTHONPATH")) if p)
    return env


_LINE_END = re.compile(rb"(?<=\n)|(?<=\r)(?!\n)")  # after a \n, or after a \r that does not start \r\n


def _prefix_lines(stream, target, index: int, writing: threading.Lock) -> None:
    """Forward `stream` to `target` line by line as each line ends, each prefixed with "[index] ".

    A '\r' ends a line too: Keras's progress bar redraws one line with '\r' and ends it with '\n' only at
    the epoch's end, so waiting for '\n' would hold a whole epoch's bar back, and let another writer's line
    (Gloo's, on the same stream) land in its middle. The backspaces the bar sends before its '\r' are
    dropped: the '\r' alone returns to the line's start, and the prefix must not be erased.
    """
    pending = b""
    for chunk in iter(lambda: stream.read1(65536), b""):
        *lines, pending = _LINE_END.split(pending + chunk)
        _write_lines(lines, target, index, writing)
    _write_lines([pending] if pending else [], target, index, writing)
    stream.close()


def _write_lines(lines, target, index: int, writing: threading.Lock) -> None:
    for line in lines:
        text = line.replace(b"\b", b"").decode(errors="replace")
        if text.strip("\r\n") == "" and not text.endswith("\n"):
            continue  # only the bar's erasing: nothing to show
        with writing:
            target.write(f"[{index}] {text}")
            target.flush()


def _free_port() -> int:
    """A port free now. Another program could take it before process 0 binds it; then the job fails
    at start with JAX's bind error, and a rerun picks another."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _die_with_parent() -> None:
    """Linux: the child gets SIGTERM if the launcher dies (even by SIGKILL), so no orphan keeps training."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
