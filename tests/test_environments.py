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
])
def test_a_broken_engine_environment_is_refused_naming_the_variable(env, says):
    with pytest.raises(UsageError) as refused:
        cluster.choose_processes("jax", {}, env, False)
    assert says in str(refused.value)


def test_tensorflow_is_refused_in_an_engine_job_but_not_on_pathways():
    with pytest.raises(UsageError, match="--backend jax"):
        cluster.choose_processes("tensorflow", {}, recorded.JOBSET_POD_2.env, False)
    assert cluster.choose_processes("tensorflow", {}, recorded.PATHWAYS_HEAD.env, False)[0].source == "pathways"
