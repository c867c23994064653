"""Where a multi-process job is read from: one ordered decision, as a table (no cluster needed)."""

import pytest

from acceltrain import cluster, environments
from acceltrain.errors import UsageError

NO_FLAGS = {}
FLAGS = {"coordinator": "10.0.0.1:1234", "num_processes": 4, "process_id": 3}
LAUNCH = {cluster.ENV_COORDINATOR: "127.0.0.1:5000", cluster.ENV_NUM_PROCESSES: "2", cluster.ENV_PROCESS_ID: "1"}
SLURM = {"SLURM_JOB_ID": "77", "SLURM_NTASKS": "8", "SLURM_PROCID": "5", "SLURM_STEP_NODELIST": "node[1-2]",
         "SLURM_LOCALID": "1"}
OMPI = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "2", "OMPI_MCA_orte_hnp_uri": "1;tcp://10.0.0.1:1"}


@pytest.mark.parametrize(
    "flags, env, tpu_vm, source, num, index, coordinator, reason",
    [
        (NO_FLAGS, {}, False, "single", 1, 0, None, "no cluster environment"),
        (FLAGS, {**LAUNCH, **SLURM}, True, "flags", 4, 3, "10.0.0.1:1234", "set by coordinator"),  # flags win
        (NO_FLAGS, {**LAUNCH, **SLURM}, False, "env", 2, 1, "127.0.0.1:5000", cluster.ENV_COORDINATOR),
        (NO_FLAGS, {"TPU_WORKER_HOSTNAMES": "t0,t1,t2,t3", "TPU_WORKER_ID": "2", **SLURM}, True, "tpu", 4, 2, None,
         "TPU slice of 4 hosts"),
        (NO_FLAGS, {}, True, "single", 1, 0, None, "slice size nothing names"),  # no metadata answered
        (NO_FLAGS, {"TPU_WORKER_HOSTNAMES": "t0"}, True, "single", 1, 0, None, "single-host TPU VM"),
        (NO_FLAGS, {"TPU_ACCELERATOR_TYPE": "v5litepod-8", "TPU_WORKER_ID": "0"}, True, "single", 1, 0, None,
         "single-host TPU VM (v5litepod-8, from TPU_ACCELERATOR_TYPE)"),
        (NO_FLAGS, {"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_ID": "1"}, True, "tpu", None, 1, None,
         "multi-host TPU slice (v4-16"),
        (NO_FLAGS, {"TPU_WORKER_HOSTNAMES": "t0,t1"}, False, "single", 1, 0, None, "no cluster"),  # no chips here
        (NO_FLAGS, {**SLURM, **OMPI}, False, "slurm", 8, 5, None, "SLURM: 8 tasks"),
        (NO_FLAGS, {**SLURM, "SLURM_NTASKS": "1", "SLURM_PROCID": "0"}, False, "single", 1, 0, None, "one task"),
        (NO_FLAGS, OMPI, False, "openmpi", 4, 2, None, "Open MPI: 4"),
        (NO_FLAGS, {**OMPI, "OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0"}, False, "single", 1, 0, None,
         "one process"),
        ({"num_processes": 1}, SLURM, False, "single", 1, 0, None, "num_processes 1"),  # opt out
        (NO_FLAGS, {k: v for k, v in SLURM.items() if k != "SLURM_STEP_NODELIST"}, False, "single", 1, 0, None,
         "not started by srun"),  # sbatch's own shell: one process, with the hint
    ],
)
def test_choose_processes(flags, env, tpu_vm, source, num, index, coordinator, reason):
    processes, why = cluster.choose_processes("jax", flags, env, tpu_vm)
    assert (processes.source, processes.num_processes, processes.process_id, processes.coordinator) == (
        source, num, index, coordinator)
    assert processes.distributed == (source != "single")
    assert reason in why


@pytest.mark.parametrize(
    "flags, env, says",
    [
        ({"coordinator": "10.0.0.1:1234"}, {}, "without num_processes and process_id. A multi-process job needs all "
                                               "three, e.g. acceltrain.Cluster(coordinator="),
        ({**FLAGS, "process_id": 4}, {}, "Valid: 0 to 3"),
        ({**FLAGS, "coordinator": "10.0.0.1"}, {}, "Expected HOST:PORT"),
        ({**FLAGS, "num_processes": 0}, {}, "at least 1"),
        (NO_FLAGS, {**LAUNCH, cluster.ENV_PROCESS_ID: "one"}, "ACCELTRAIN_PROCESS_ID='one'"),
        (NO_FLAGS, {k: v for k, v in OMPI.items() if k != "OMPI_MCA_orte_hnp_uri"}, "--coordinator HOST0:PORT"),
        (NO_FLAGS, {**SLURM, "SLURM_PROCID": "8"}, "SLURM_PROCID=8 with SLURM_NTASKS=8. Valid: 0 to 7"),
        (NO_FLAGS, {**SLURM, "SLURM_NTASKS": "eight"}, "SLURM_NTASKS='eight'"),
        (NO_FLAGS, {**OMPI, "OMPI_COMM_WORLD_RANK": "-1"}, "OMPI_COMM_WORLD_RANK='-1'"),
    ],
)
def test_choose_processes_refuses_a_broken_job(flags, env, says):
    with pytest.raises(UsageError, match=None) as refused:
        cluster.choose_processes("jax", flags, env, False)
    assert says in str(refused.value)


def test_no_reader_answers_a_bare_host():
    """cluster._detect is a loop over READERS (their order: test_choose_processes's rows where two sources say
    something); on a host none describes, each says nothing, so the loop ends in one process."""
    silent = [type(reader).__name__ for reader in cluster.READERS if reader.read(environments.Host({})) is not None]
    assert not silent, f"readers that answer a bare host: {silent}"


def test_a_job_is_named_by_its_flags_under_the_cli_and_by_its_arguments_under_python():
    from acceltrain.errors import cli_names

    with pytest.raises(UsageError) as refused, cli_names():
        cluster.choose_processes("jax", {"coordinator": "10.0.0.1:1234"}, {}, False)
    assert "Received --coordinator=10.0.0.1:1234 without --num-processes and --process-id" in str(refused.value)
    assert "e.g. --coordinator 10.0.0.1:1234 --num-processes 2 --process-id 0" in str(refused.value)
    with pytest.raises(UsageError) as refused:
        cluster.choose_processes("jax", {"coordinator": "10.0.0.1:1234"}, {}, False)
    assert "Received coordinator=10.0.0.1:1234 without num_processes and process_id" in str(refused.value)
    assert "--" not in str(refused.value)


@pytest.mark.parametrize("flags, env", [(FLAGS, {}), (NO_FLAGS, LAUNCH), (NO_FLAGS, SLURM)])
def test_tensorflow_multi_process_is_refused_with_the_way_out(flags, env):
    with pytest.raises(UsageError) as refused:
        cluster.choose_processes("tensorflow", flags, env, False)
    assert "--backend jax" in str(refused.value) and "keras-team/keras#20585" in str(refused.value)


@pytest.mark.parametrize("accelerator, hosts", [
    ("v2-8", "one"), ("v3-8", "one"), ("v4-8", "one"), ("v5p-8", "one"), ("v5litepod-1", "one"), ("v5e-1", "one"),
    ("v5litepod-8", "one"), ("v6e-8", "one"), ("tpu7x-8", "one"), ("v2-32", "several"), ("v4-16", "several"),
    ("v5litepod-16", "several"), ("v5p-16", "several"), ("v6e-256", "several"), ("", None), ("v5e", None),
    ("gpu-8", None), (None, None),
])
def test_slice_hosts(accelerator, hosts):
    assert environments.slice_hosts(accelerator) == hosts


def test_metadata_names_the_slice_when_the_environment_does_not():
    processes, why = cluster.choose_processes("jax", NO_FLAGS, {}, True, {"accelerator-type": "v5litepod-32"})
    assert processes.source == "tpu" and "v5litepod-32, from the TPU metadata server" in why
    assert cluster.choose_processes("jax", NO_FLAGS, {}, True, {"accelerator-type": "v4-8"})[0] == cluster.SINGLE


def test_metadata_is_not_asked_where_the_environment_answers_or_forbids_it():
    for env in ({"TPU_ACCELERATOR_TYPE": "v4-8"}, {"TPU_WORKER_HOSTNAMES": "t0"}, {"TPU_SKIP_MDS_QUERY": "1"}):
        assert cluster.tpu_metadata(env) == {}


def test_tensorflow_on_a_multi_host_slice_is_refused_naming_the_slice():
    with pytest.raises(UsageError) as refused:
        cluster.choose_processes("tensorflow", NO_FLAGS, {"TPU_ACCELERATOR_TYPE": "v5litepod-16"}, True)
    assert "multi-host TPU slice (v5litepod-16" in str(refused.value) and "--backend jax" in str(refused.value)


def test_tensorflow_single_process_is_fine():
    assert cluster.choose_processes("tensorflow", NO_FLAGS, {}, False)[0] == cluster.SINGLE
