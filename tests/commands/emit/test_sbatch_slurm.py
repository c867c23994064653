"""The sbatch script `acceltrain launch --emit sbatch` prints, run by a real single-node Slurm cluster (Debian's
slurmctld, slurmd, munge): a 2-task job trains as one JAX job with global metrics, and a job requeued mid-run
checkpoints and resumes to the weights of the uninterrupted run. Slow (a minute a job); `.ci/run` installs the
packages and runs them (`-m slow -k slurm`). They skip, saying so, only where Slurm is not installed or this is
not root (slurmd must be)."""

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tests import support

DAEMONS = ("munged", "slurmctld", "slurmd")
SCRIPT = support.SCRIPTS / "slurm_fit.py"
EPOCHS = 4
JOB_SECONDS = 300  # one job here: ~50 s alone on 2 cores; generous for a loaded machine


class Slurm:
    """A running single-node cluster: `command` runs a Slurm client against it."""

    def __init__(self, conf: Path):
        self.conf = conf

    def env(self, **extra) -> dict:
        # The job inherits sbatch's environment (--export=ALL): this acceltrain first on PATH and PYTHONPATH.
        path = f"{Path(support.command()[0]).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        return support.env(SLURM_CONF=str(self.conf), PATH=path, **extra)

    def command(self, *args, cwd=None) -> str:
        done = subprocess.run(args, env=self.env(), cwd=cwd, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{' '.join(args)}: {done.stderr}"
        return done.stdout.strip()

    def job(self, job_id: str) -> dict:
        fields = self.command("scontrol", "show", "job", job_id, "-o").split()
        return dict(field.split("=", 1) for field in fields if "=" in field)

    def wait_until_done(self, job_id: str, timeout: float = JOB_SECONDS) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job["JobState"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
                return job
            time.sleep(1)
        raise AssertionError(f"job {job_id} still {self.job(job_id)['JobState']} after {timeout:.0f} s")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A single-node Slurm cluster of this host (CPUs=2; no cgroups: proctrack/linuxproc; no accounting), its
    daemons started here and stopped at the end, with any job left."""
    missing = [name for name in (*DAEMONS, "sbatch", "scontrol") if shutil.which(name) is None
               and not Path("/usr/sbin", name).exists()]
    if missing:
        pytest.skip(f"Slurm is not installed here (missing {', '.join(missing)}): apt-get install slurmctld slurmd "
                    "slurm-client munge (.ci/run does)")
    if os.geteuid() != 0:
        pytest.skip("slurmd runs jobs as their user and must be started as root; this is not root")
    folder = tmp_path_factory.mktemp("slurm")
    host = socket.gethostname().split(".")[0]
    ports = _free_ports(2)
    conf = folder / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=acceltrain-tests", f"SlurmctldHost={host}", "SlurmUser=root", "AuthType=auth/munge",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SwitchType=switch/none", "MpiDefault=none",
        "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none", f"SlurmctldPort={ports[0]}", f"SlurmdPort={ports[1]}",
        f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool",
        f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log", f"SlurmdLogFile={folder}/slurmd.log",
        "ReturnToService=2", "KillWait=30", "MinJobAge=600",
        f"NodeName={host} CPUs=2 State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP", ""]))
    (folder / "state").mkdir()
    (folder / "spool").mkdir()
    started = []
    try:
        started += _start_munge()
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([f"/usr/sbin/{daemon}", "-f", str(conf)], check=True, timeout=60)
            started.append(folder / f"{daemon}.pid")
        cluster = Slurm(conf)
        deadline = time.monotonic() + 60
        while cluster.command("sinfo", "-h", "-o", "%t") != "idle":
            assert time.monotonic() < deadline, f"the node never became idle:\n{(folder / 'slurmd.log').read_text()}"
            time.sleep(0.5)
        yield cluster
    finally:
        subprocess.run(["scancel", "--full", "--partition=debug"], env=support.env(SLURM_CONF=str(conf)),
                       capture_output=True, timeout=60)
        for pid_file in reversed(started):
            _stop(pid_file)


def _start_munge() -> list:
    """munged, unless one answers already (then it is not ours to stop)."""
    if subprocess.run("munge -n | unmunge", shell=True, capture_output=True, timeout=30).returncode == 0:
        return []
    Path("/run/munge").mkdir(parents=True, exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=True, timeout=60)
    return [Path("/run/munge/munged.pid")]


def _stop(pid_file: Path) -> None:
    """SIGTERM the daemon whose pid the file holds, and wait for it to go."""
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, 9)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for one in sockets:
            one.bind(("127.0.0.1", 0))
        return [one.getsockname()[1] for one in sockets]
    finally:
        for one in sockets:
            one.close()


def _submit(slurm: Slurm, folder: Path, name: str) -> str:
    """The emitted sbatch script of SCRIPT in 2 tasks on this node, submitted from `folder`; its job id."""
    emitted = subprocess.run(
        support.command("launch", "--emit", "sbatch", "--target", "cpu", "--processes", "2", "--name", name,
                        "--checkpoint-dir", folder / "checkpoints", "--compile-cache-dir", folder.parent / "cache",
                        "--checkpoint-every", "1 epochs", SCRIPT, folder / "weights", "--epochs", str(EPOCHS)),
        env=slurm.env(), capture_output=True, text=True, timeout=60)
    assert emitted.returncode == 0, emitted.stderr
    (folder / "job.sh").write_text(emitted.stdout)
    return slurm.command("sbatch", "--parsable", "job.sh", cwd=folder).split(";")[0]


# Every sbatch script --emit writes (test_combinations.py's list), and whether this single node of 2 CPUs can hold it.
EMITTED = [("cpu", 1, 1, True), ("cpu", 2, 1, True), ("cpu", 1, 2, False), ("cpu", 2, 2, False),
           ("h100-8", 1, 1, False), ("h100-8", 1, 2, False)]


@pytest.mark.slow
def test_slurm_itself_accepts_every_sbatch_script_acceltrain_emits(slurm, tmp_path):
    """Slurm's own reading of each emitted script (`sbatch --test-only`: parsed and scheduled, not run): the ones this
    node can hold would start; the others (2 nodes, GPUs) are refused for the resources they ask, not as a script."""
    for target, processes, nodes, fits in EMITTED:
        emitted = subprocess.run(
            support.command("launch", "--emit", "sbatch", "--target", target, "--processes", str(processes),
                            "--nodes", str(nodes), SCRIPT),
            env=slurm.env(), capture_output=True, text=True, timeout=60)
        assert emitted.returncode == 0, emitted.stderr
        script = tmp_path / f"{target}-p{processes}-n{nodes}.sh"
        script.write_text(emitted.stdout)
        done = subprocess.run(["sbatch", "--test-only", str(script)], env=slurm.env(), cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        said = done.stdout + done.stderr
        if fits:
            assert done.returncode == 0 and "to start at" in said, (script.name, said)
        else:
            assert done.returncode != 0 and ("Requested node configuration is not available" in said
                                             or "Invalid generic resource" in said), (script.name, said)


def _weights(folder: Path, rank: int) -> list:
    with np.load(folder / f"weights.{rank}.npz") as saved:
        return [saved[key] for key in sorted(saved.files, key=lambda k: int(k.split("_")[1]))]


@pytest.fixture(scope="module")
def uninterrupted(slurm, tmp_path_factory):
    folder = tmp_path_factory.mktemp("uninterrupted")
    job_id = _submit(slurm, folder, "whole")
    return folder, job_id, slurm.wait_until_done(job_id)


@pytest.mark.slow
def test_a_slurm_sbatch_job_of_2_tasks_trains_as_one_jax_job(uninterrupted):
    folder, job_id, job = uninterrupted
    output = (folder / f"whole-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", output[-3000:]
    banners = [line for line in output.splitlines() if line.startswith("acceltrain: jax on")]
    assert len(banners) == 2 and all("2 processes" in line and "processes: SLURM: 2 tasks" in line for line in banners)
    # One job: each process reports the global loss, the same in both; and both hold the same weights.
    losses = [line for line in output.splitlines() if line.startswith("final loss")]
    assert len(losses) == 2 and losses[0] == losses[1], losses
    for ours, theirs in zip(_weights(folder, 0), _weights(folder, 1)):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.slow
def test_a_slurm_job_requeued_then_signalled_mid_run_resumes_to_the_uninterrupted_weights(slurm, uninterrupted,
                                                                                          tmp_path_factory):
    """Interrupted twice: `scontrol requeue` (Slurm requeues the job), then SIGTERM to its tasks, as the script's
    `--signal=TERM@120` notice sends before the time limit (the script requeues itself on the exit code)."""
    folder = tmp_path_factory.mktemp("requeued")
    job_id = _submit(slurm, folder, "requeued")
    checkpoints = folder / "checkpoints" / "fit-1"

    _wait_for_a_checkpoint_of_epoch(slurm, job_id, checkpoints, 1)
    slurm.command("scontrol", "requeue", job_id)  # Slurm SIGTERMs every task, then queues the job again
    _start_when_requeued(slurm, job_id, restarts=1)

    _wait_for_a_checkpoint_of_epoch(slurm, job_id, checkpoints, 2)
    slurm.command("scancel", "--signal=TERM", job_id)  # the tasks only, as --signal=TERM@120 does
    _start_when_requeued(slurm, job_id, restarts=2)
    job = slurm.wait_until_done(job_id)

    output = (folder / f"requeued-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED" and job["Restarts"] == "2", output[-3000:]
    assert output.count("Stopped by SIGTERM; a checkpoint is saved") == 4, output[-3000:]
    assert output.count("acceltrain: resuming from epoch-") == 4, output[-3000:]
    whole = uninterrupted[0]
    for rank in (0, 1):
        for resumed, straight in zip(_weights(folder, rank), _weights(whole, rank)):
            np.testing.assert_array_equal(resumed, straight)


def _wait_for_a_checkpoint_of_epoch(slurm: Slurm, job_id: str, checkpoints: Path, epoch: int) -> None:
    deadline = time.monotonic() + JOB_SECONDS
    while not any(p.name.startswith("epoch-") and "tmp" not in p.name and int(p.name.split("-")[1]) >= epoch
                  for p in _listed(checkpoints)):
        assert time.monotonic() < deadline and slurm.job(job_id)["JobState"] in ("PENDING", "RUNNING"), \
            f"no checkpoint of epoch {epoch} was written: {slurm.job(job_id)}"
        time.sleep(0.5)


def _start_when_requeued(slurm: Slurm, job_id: str, restarts: int) -> None:
    """Wait for the job to be queued again and for its last run's step daemons to end, then start it: Slurm holds
    a requeued job back for a while, and a job started while its last run's tasks still save their checkpoint on
    the node can be killed as non-startable ("Job credential revoked": seen twice in a row, the save taking 3 s)."""
    deadline = time.monotonic() + 120
    while (job := slurm.job(job_id))["JobState"] != "PENDING" or job["Restarts"] != str(restarts):
        assert time.monotonic() < deadline, job
        time.sleep(0.5)
    while steps := _step_daemons(job_id):
        assert time.monotonic() < deadline, f"the last run's steps never ended after the requeue: {steps}"
        time.sleep(0.5)
    slurm.command("scontrol", "update", f"JobId={job_id}", "StartTime=now")


def _step_daemons(job_id: str) -> list[str]:
    """The slurmstepd processes of the job still on this node ("slurmstepd: [2.0]", "[2.batch]"): the node's idle
    state and the job's PENDING come before they end."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            command = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # the process ended while listed
        if command.startswith(f"slurmstepd: [{job_id}."):
            found.append(command.strip())
    return found


def _listed(folder: Path) -> list:
    return list(folder.iterdir()) if folder.is_dir() else []
