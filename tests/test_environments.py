"""Each engine's recorded environment gives the right process count, index and coordinator (no engine here)."""

import pytest

from acceltrain import cluster
from acceltrain.errors import UsageError
from tests import engine_environments as recorded


@pytest.mark.parametrize("job", recorded.ALL, ids=[job.name for job in recorded.ALL])
def test_each_engine_names_its_job(job):
    processes, why = cluster.choose_processes("jax", {}, job.env, job.cloud_tpu_vm, started=job.started)
    assert (processes.source, processes.num_processes, processes.process_id, processes.coordinator) == (
        job.source, job.num_processes, job.process_id, job.coordinator)
    assert processes.distributed == job.distributed
    for words in job.says:
        assert words in why


def test_flags_and_launch_still_win_over_an_engine():
    flags = {"coordinator": "10.0.0.1:1234", "num_processes": 2, "process_id": 0}
    assert cluster.choose_processes("jax", flags, recorded.KUBEFLOW_PROCESS_1.env, False)[0].source == "flags"
    launched = {cluster.ENV_COORDINATOR: "127.0.0.1:5", cluster.ENV_NUM_PROCESSES: "2", cluster.ENV_PROCESS_ID: "0"}
    assert cluster.choose_processes("jax", {}, {**launched, **recorded.SKYPILOT_NODE_1.env}, False)[0].source == "env"


@pytest.mark.parametrize("env, says", [
    ({**recorded.KUBEFLOW_PROCESS_1.env, "JAX_PROCESS_ID": "2"}, "JAX_PROCESS_ID=2 with JAX_NUM_PROCESSES=2"),
    ({"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}, "without JAX_COORDINATOR_ADDRESS"),
    ({**recorded.SKYPILOT_NODE_1.env, "SKYPILOT_NODE_IPS": ""}, "without SKYPILOT_NODE_IPS"),
    ({**recorded.JOBSET_POD_2.env, "JOB_COMPLETIONS": "two"}, "JOB_COMPLETIONS='two'"),
    ({**recorded.RAY_JOB_WORKER_1.env, "ACCELTRAIN_RAY_WORLD_RANK": "2"}, "ACCELTRAIN_RAY_WORLD_RANK=2"),
])
def test_a_broken_engine_environment_is_refused_naming_the_variable(env, says):
    with pytest.raises(UsageError) as refused:
        cluster.choose_processes("jax", {}, env, False)
    assert says in str(refused.value)


def test_tensorflow_is_refused_in_an_engine_job_but_not_on_pathways():
    with pytest.raises(UsageError, match="--backend jax"):
        cluster.choose_processes("tensorflow", {}, recorded.JOBSET_POD_2.env, False)
    assert cluster.choose_processes("tensorflow", {}, recorded.PATHWAYS_HEAD.env, False)[0].source == "pathways"


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["kubeflow", "skypilot"])
def test_two_processes_an_engine_describes_train_as_one_job_and_the_banner_names_it(engine, tmp_path):
    """Two `acceltrain run` processes given only the engine's variables (process 0 on this host) join one job."""
    import socket
    import subprocess

    from tests import support

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]

    def variables(index):
        if engine == "kubeflow":
            return {"JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(index)}
        return {"SKYPILOT_NODE_RANK": str(index), "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NODE_IPS": "127.0.0.1\n127.0.0.2",
                "JAX_COORDINATOR_PORT": str(port)}

    processes = [subprocess.Popen(support.command("run", support.SCRIPTS / "slurm_fit.py", tmp_path / "w", "--epochs", "1"),
                                  env=support.env(**variables(index), SLURM_PROCID=str(index)), text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for index in (0, 1)]
    outputs = [process.communicate(timeout=300) for process in processes]
    for process, (out, err) in zip(processes, outputs):
        assert process.returncode == 0, err[-3000:]
        assert "2 processes" in err and ("Kubeflow Trainer" if engine == "kubeflow" else "SkyPilot: node") in err
    losses = [next(line for line in out.splitlines() if line.startswith("final loss")) for out, _ in outputs]
    assert losses[0] == losses[1]  # one job: the global loss in both
