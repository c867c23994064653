"""The Ray job `acceltrain launch --emit ray` writes, run by a real local Ray cluster (a head node and a worker node,
started here from the package registry's Ray, stopped at the end whatever happens): 2 Ray Train workers train an
unchanged script as one JAX job, and a job whose worker is killed mid-run is restarted by Ray Train's
FailureConfig and resumes to the weights of the uninterrupted run. Slow (a minute a job); `.ci/run` installs Ray and
runs them (`-m slow -k ray`). They skip, saying so, only where Ray is not installed. The pieces run fast."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from acceltrain.commands import ray_job
from tests import support

SCRIPT = support.SCRIPTS / "slurm_fit.py"
EPOCHS = 3
JOB_SECONDS = 400  # one job here: ~55 s alone on 2 cores, Ray's start included; generous for a loaded machine


def test_a_workers_run_is_told_its_rank_the_job_size_and_rank_0s_address():
    env = ray_job.child_environment({"PATH": "/bin", ray_job.ENV_RANK: "9"}, {"JAX_COMPILATION_CACHE_DIR": "/c"},
                                    1, 2, "10.0.0.2:4000")
    assert env == {"PATH": "/bin", "JAX_COMPILATION_CACHE_DIR": "/c", "ACCELTRAIN_RAY_WORLD_RANK": "1",
                   "ACCELTRAIN_RAY_WORLD_SIZE": "2", "ACCELTRAIN_RAY_COORDINATOR": "10.0.0.2:4000"}
    from acceltrain import cluster

    processes, why = cluster.choose_processes("jax", {}, env, False)
    assert (processes.source, processes.num_processes, processes.process_id, processes.coordinator) == (
        "ray", 2, 1, "10.0.0.2:4000") and "Ray Train: worker 1 of 2" in why


def test_acceltrain_in_the_command_is_this_workers_python_and_anything_else_is_kept():
    assert ray_job.child_command(["acceltrain", "run", "a.py"]) == [sys.executable, "-m", "acceltrain", "run", "a.py"]
    assert ray_job.child_command(["/opt/bin/acceltrain", "run", "a.py"]) == ["/opt/bin/acceltrain", "run", "a.py"]


def test_a_child_started_as_a_worker_starts_it_dies_with_the_thread_that_started_it(tmp_path):
    """PR_SET_PDEATHSIG: Ray's worker runs the training function in a thread; when Ray kills the worker, its
    `acceltrain run` must not live on (it would hold its devices and the job's port)."""
    import threading

    started = []

    def start():
        started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                        preexec_fn=ray_job._die_with_parent))
        time.sleep(1)  # the thread ends here, as a killed worker's would

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    try:
        assert started[0].wait(timeout=30) == -signal.SIGKILL
    finally:
        if started[0].poll() is None:
            started[0].kill()


# --- A real local Ray cluster ----------------------------------------------------------------------------------

class RayCluster:
    """Two nodes of this host, each a `ray start --block` in its own session: stopped by ending every process of
    those sessions (Ray's daemons and the workers they started), never by name."""

    def __init__(self, folder: Path):
        try:
            import ray  # noqa: F401
        except ImportError:
            pytest.skip("Ray is not installed here: pip install 'ray[train]==2.60.0' (.ci/run does)")
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
        self.folder = folder
        self.nodes = []

    def start(self) -> None:
        common = ["--block", "--num-cpus", "1", "--disable-usage-stats"]
        self._node(["--head", "--port", str(self.port), "--include-dashboard=false", "--temp-dir", self.temp, *common],
                   "head")
        self._wait_for_nodes(1)
        self._node(["--address", self.address, *common], "worker")
        self._wait_for_nodes(2)

    def _node(self, args, name: str) -> None:
        log = open(self.folder / f"{name}.log", "w")
        self.nodes.append(subprocess.Popen([sys.executable, "-m", "ray.scripts.scripts", "start", *args],
                                           env=support.env(), stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))
        log.close()

    def _wait_for_nodes(self, count: int) -> None:
        ask = f"import ray; ray.init(address='{self.address}', logging_level='ERROR'); " \
              "print(sum(node['Alive'] for node in ray.nodes()))"
        deadline = time.monotonic() + 180
        while True:
            for node in self.nodes:
                assert node.poll() is None, (self.folder / "head.log").read_text()[-3000:]
            answer = subprocess.run([sys.executable, "-c", ask], env=support.env(), capture_output=True, text=True,
                                    timeout=120)
            if answer.returncode == 0 and answer.stdout.strip().splitlines()[-1:] == [str(count)]:
                return
            assert time.monotonic() < deadline, f"{count} Ray node(s) never came up: {answer.stderr[-3000:]}"
            time.sleep(1)

    def stop(self) -> None:
        sessions = {node.pid for node in self.nodes}  # start_new_session: each node's pid is its session's id
        for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            pids = _in_sessions(sessions)
            for pid in pids:
                with _gone():
                    os.kill(pid, sig)
            deadline = time.monotonic() + grace
            while _in_sessions(sessions) and time.monotonic() < deadline:
                time.sleep(0.2)
        for node in self.nodes:
            node.wait(timeout=10)
        left = _in_sessions(sessions)
        shutil.rmtree(self.temp, ignore_errors=True)
        assert not left, f"Ray processes left: {left}"

    def job(self, folder: Path, name: str) -> subprocess.Popen:
        """The driver `acceltrain launch --emit ray` prints for SCRIPT, on 2 workers, started against this cluster."""
        emitted = support.run_cli("launch", "--emit", "ray", "--target", "cpu", "--nodes", "2", "--name", name,
                                  "--max-restarts", "2", "--checkpoint-dir", folder / "checkpoints",
                                  "--compile-cache-dir", folder.parent / "cache", "--checkpoint-every", "10 steps",
                                  SCRIPT, folder / "weights", "--epochs", str(EPOCHS), timeout=60)
        assert emitted.returncode == 0, emitted.stderr
        (folder / "job.py").write_text(emitted.stdout)
        return subprocess.Popen([sys.executable, "job.py"], cwd=folder, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT,
                                env=support.env(RAY_ADDRESS=self.address, RAY_DEDUP_LOGS="0", NO_COLOR="1"))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _in_sessions(sessions: set) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with _gone():
                if os.getsid(int(entry.name)) in sessions:
                    found.append(int(entry.name))
    return found


class _gone:
    """A process that ended meanwhile is no error here."""

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        return kind is not None and issubclass(kind, (ProcessLookupError, PermissionError, FileNotFoundError))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    ray = RayCluster(tmp_path_factory.mktemp("ray"))
    try:
        ray.start()
        yield ray
    finally:
        ray.stop()


def _finish(job: subprocess.Popen) -> str:
    try:
        output, _ = job.communicate(timeout=JOB_SECONDS)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    return output


def _weights(folder: Path, rank: int) -> list:
    with np.load(folder / f"weights.{rank}.npz") as saved:
        return [saved[key] for key in sorted(saved.files, key=lambda k: int(k.split("_")[1]))]


@pytest.fixture(scope="module")
def uninterrupted(cluster, tmp_path_factory):
    folder = tmp_path_factory.mktemp("uninterrupted")
    job = cluster.job(folder, "whole")
    return folder, job, _finish(job)


@pytest.mark.slow
def test_a_ray_job_of_2_workers_trains_an_unchanged_script_as_one_jax_job(uninterrupted):
    folder, job, output = uninterrupted
    assert job.returncode == 0, output[-3000:]
    banners = {line.partition("acceltrain: ")[2] for line in output.splitlines() if "acceltrain: jax on" in line}
    assert len(banners) == 2 and all("2 processes" in line for line in banners), banners
    assert {"worker 0 of 2" in line for line in banners} == {True, False}  # one banner per rank
    # One job: each process reports the global loss, the same in both; and both hold the same weights.
    losses = {line.partition("final loss")[2] for line in output.splitlines() if "final loss" in line}
    assert len(losses) == 1, losses
    for ours, theirs in zip(_weights(folder, 0), _weights(folder, 1), strict=True):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.slow
def test_a_ray_job_whose_worker_is_killed_mid_run_restarts_and_resumes_to_the_uninterrupted_weights(
        cluster, uninterrupted, tmp_path_factory):
    """SIGKILL to the Ray worker of rank 1 (the actor process, as a lost node would end it) once a checkpoint within
    the second epoch is written: Ray Train ends the worker group and starts it again (FailureConfig), and both runs
    resume from the checkpoint."""
    folder = tmp_path_factory.mktemp("killed")
    job = cluster.job(folder, "killed")
    try:
        run = _wait_for_a_checkpoint_past_epoch_1(job, folder / "checkpoints" / "fit-1")
        worker = _parent(run)
        ended = list(folder.glob("weights.*.npz"))
        os.kill(worker, signal.SIGKILL)
    finally:
        output = _finish(job)
    assert not ended, ended  # the kill came mid-run, before any process had finished
    assert job.returncode == 0, output[-4000:]
    resumed = {line.partition("resuming from ")[2].split(":")[0] for line in output.splitlines()
               if "acceltrain: resuming from epoch-" in line}
    assert len(resumed) == 1, output[-4000:]  # both processes, from one checkpoint
    final = {line.partition("final loss")[2] for line in output.splitlines() if "final loss" in line}
    whole = {line.partition("final loss")[2] for line in uninterrupted[2].splitlines() if "final loss" in line}
    assert final == whole, (final, whole)
    for rank in (0, 1):
        for resumed, straight in zip(_weights(folder, rank), _weights(uninterrupted[0], rank), strict=True):
            np.testing.assert_array_equal(resumed, straight)


def _wait_for_a_checkpoint_past_epoch_1(job: subprocess.Popen, checkpoints: Path) -> int:
    """Once a checkpoint within epoch 2 (or later) is whole, the pid of rank 1's `acceltrain run`, still running."""
    deadline = time.monotonic() + JOB_SECONDS
    while True:
        assert job.poll() is None, "the job ended before a worker could be killed:\n" + job.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint past epoch 1 was written"
        past = [p for p in checkpoints.glob("epoch-*") if "tmp" not in p.name and int(p.name.split("-")[1]) >= 1
                and int(p.name.split("-")[3]) > 0]
        run = _rank_1_run(checkpoints.parent)
        if past and run is not None:
            return run
        time.sleep(0.2)


def _rank_1_run(checkpoint_dir: Path) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with _gone():
            command = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
            if str(checkpoint_dir).encode() in command and b"run" in command \
                    and f"{ray_job.ENV_RANK}=1".encode() in environ:
                return int(entry.name)
    return None


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
