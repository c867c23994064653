"""Every emitted job starts: for each engine x target kind x --processes 1, 2 x --nodes 1, 2, the artifact is
rendered, then read back through acceltrain's own cluster detection (cluster.choose_processes) as each of its
processes would see it, the engine's variables set as the engine sets them, and it must make one job: N
processes, ids 0..N-1, one coordinator that all of them name, the devices of each process. A combination an
engine cannot run is refused (exit 2), saying why: the table of refusals below is the whole list.

How each engine sets a process's variables (what the readers below copy):
- JobSet: an Indexed Job's pod gets JOB_COMPLETION_INDEX, its hostname is <jobset>-<replicated job>-<job index>-
  <pod index> (jobset's pkg/controllers/jobset_controller.go, the pod's subdomain the JobSet's name); the
  artifact's own env (JOBSET_NAME from the jobset-name annotation, JOB_COMPLETIONS). On a TPU slice GKE's
  webhook also sets TPU_WORKER_ID (the completion index) and TPU_WORKER_HOSTNAMES (every pod's <hostname>.<subdomain>).
- Slurm: `sbatch --nodes N --ntasks-per-node T` and `srun` give each task SLURM_JOB_ID, SLURM_NTASKS = N x T,
  SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID and SLURM_STEP_NODELIST (the step's nodes, the same in every task:
  JAX's SlurmCluster takes its first node as the coordinator).
- SkyPilot: every host that runs `run` gets SKYPILOT_NODE_RANK, SKYPILOT_NUM_NODES and SKYPILOT_NODE_IPS (the
  head first); on a TPU slice, which the task counts as one node, every host of it runs `run` and counts as one
  (sky/backends/task_codegen.py: SKYPILOT_NUM_NODES is the number of IPs, num_nodes x IPs a node). There the
  host is a Cloud TPU VM, which acceltrain's detection reads first: JAX takes the slice from the metadata server.
- Ray: the driver's run_job starts one Ray Train worker a process; each starts `acceltrain run` with its world rank,
  the world size and rank 0's address (acceltrain.commands.ray_job.child_environment), which acceltrain reads before
  a TPU VM's own variables.
"""

import itertools
import re
import shlex

import pytest
import yaml

from acceltrain import cluster, environments
from acceltrain.commands import emit
from acceltrain.commands.emit import jobset, ray, sbatch, skypilot
from acceltrain.errors import UsageError

TARGETS = {"tpu": "tpu-v5e-16", "gpu": "h100-8", "cpu": "cpu"}  # a 4-host slice of 4 chips; 8-GPU boxes; CPUs
COMBINATIONS = list(itertools.product(emit.ENGINES, TARGETS, (1, 2), (1, 2)))


def refusal(engine: str, kind: str, processes: int, nodes: int) -> str | None:
    """What the emit must say when it refuses the combination; None where it must run. In the order emit checks."""
    if kind != "cpu" and processes > 1:
        return "one process a host"
    if kind == "tpu" and nodes > 1:
        return "bigger slice"
    if engine == "sbatch" and kind == "tpu":
        return "For a TPU slice pass --emit jobset"
    if engine == "skypilot" and processes > 1:
        return "SkyPilot runs `run` once a node"
    return None


@pytest.mark.parametrize("engine, kind, processes, nodes", COMBINATIONS,
                         ids=[f"{e}-{k}-p{p}-n{n}" for e, k, p, n in COMBINATIONS])
def test_every_combination_is_one_job_or_refused(engine, kind, processes, nodes, tmp_path, monkeypatch, capsys):
    from acceltrain import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "acceltrain"\n')  # SkyPilot's setup installs it
    (tmp_path / "train.py").write_text("")
    command = ["launch", "--emit", engine, "--target", TARGETS[kind], "--processes", str(processes), "--nodes",
               str(nodes), "train.py"]
    code = cli.main(command)
    out, err = capsys.readouterr()
    said = refusal(engine, kind, processes, nodes)
    if said is not None:
        assert code == 2 and out == "" and said in err and "Traceback" not in err, (code, err)
        return
    assert code == 0, err
    module = {"jobset": jobset, "sbatch": sbatch, "skypilot": skypilot, "ray": ray}[engine]
    # Its engine's own checks: the JobSet CRD's schema, the #SBATCH lines, the task's structure (SkyPilot's own
    # parser reads them all in test_emit.py::test_skypilot_parses_every_task_acceltrain_emits).
    assert all("image is still" in problem for problem in module.check(out)), module.check(out)
    want_processes = processes * nodes if kind == "cpu" else (4 if kind == "tpu" else nodes)
    devices = {"tpu": 4, "gpu": 8, "cpu": 1}[kind]
    jobs, per_process = READERS[engine](out, kind)
    assert len(jobs) == want_processes, jobs
    assert per_process == devices
    assert_one_job(jobs, want_processes)
    head = next(line for line in out.splitlines() if line.startswith("# acceltrain"))  # says the job: its processes (pods, hosts, nodes) and each one's devices
    assert re.search(rf"\b{want_processes} (pod|host|node|process)", head), head
    assert re.search(rf"\bx {devices} (chips|GPUs|CPU device)", head), head


def assert_one_job(jobs: list, count: int) -> None:
    """Each process's (Processes, coordinator as JAX would reach it): count, ids 0..count-1, one coordinator."""
    if count == 1:
        assert [found.source for found, _ in jobs] == ["single"], jobs
        return
    assert all(found.num_processes in (count, None) for found, _ in jobs), jobs
    ids = sorted(found.process_id for found, _ in jobs if found.process_id is not None)
    assert ids == list(range(count)), jobs
    coordinators = {where for _, where in jobs}
    assert len(coordinators) == 1 and None not in coordinators, coordinators


def read_jobset(text: str, kind: str):
    document = yaml.safe_load(text)
    (replicated,) = document["spec"]["replicatedJobs"]
    spec = replicated["template"]["spec"]
    assert spec["parallelism"] == spec["completions"] and replicated["replicas"] == 1
    (container,) = spec["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    name, pods = document["metadata"]["name"], spec["completions"]
    hostnames = [f"{name}-{replicated['name']}-0-{index}" for index in range(pods)]
    jobs = []
    for index in range(pods):
        seen = {"JOB_COMPLETION_INDEX": str(index), "HOSTNAME": hostnames[index], "JOBSET_NAME": name,
                "JOB_COMPLETIONS": env["JOB_COMPLETIONS"]}
        if kind == "tpu":  # GKE's TPU webhook, for a multi-host slice's Indexed Job
            seen |= {"TPU_WORKER_ID": str(index), "TPU_WORKER_HOSTNAMES": ",".join(f"{h}.{name}" for h in hostnames)}
        found, _ = cluster.choose_processes("jax", {}, seen, cloud_tpu_vm=kind == "tpu")
        # JAX's own TPU cluster reaches worker 0 of TPU_WORKER_HOSTNAMES; the others name it themselves.
        where = found.coordinator or seen.get("TPU_WORKER_HOSTNAMES", "").split(",")[0] or None
        jobs.append((found, where))
    limits = container.get("resources", {}).get("limits", {})
    per_process = limits.get("google.com/tpu") or limits.get("nvidia.com/gpu") or _simulated(container["command"][-1])
    return jobs, per_process


def read_sbatch(text: str, kind: str):
    options = dict(re.findall(r"^#SBATCH\s+--([a-z-]+)(?:=(\S+))?", text, flags=re.M))
    nodes, per_node = int(options["nodes"]), int(options["ntasks-per-node"])
    nodelist = f"node[0-{nodes - 1}]" if nodes > 1 else "node0"
    jobs = []
    for rank in range(nodes * per_node):
        seen = {"SLURM_JOB_ID": "7", "SLURM_NTASKS": str(nodes * per_node), "SLURM_PROCID": str(rank),
                "SLURM_LOCALID": str(rank % per_node), "SLURM_NODEID": str(rank // per_node),
                "SLURM_STEP_NODELIST": nodelist}
        found, _ = cluster.choose_processes("jax", {}, seen, cloud_tpu_vm=False)
        jobs.append((found, found.coordinator or seen["SLURM_STEP_NODELIST"]))  # JAX: the list's first node
    if kind == "gpu":
        local = re.search(r"^export JAX_LOCAL_DEVICE_IDS=(\S+)", text, flags=re.M).group(1).split(",")
        assert per_node == 1 and len(local) == int(options["gpus-per-node"])
        return jobs, len(local)
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    return jobs, _simulated(srun)


def read_skypilot(text: str, kind: str):
    task = yaml.safe_load(text)
    hosts = task["num_nodes"]
    accelerators = task["resources"].get("accelerators", "")
    if kind == "tpu":  # a slice is one node of the task; each of its hosts runs `run`
        assert hosts == 1
        slice_name = accelerators.removeprefix("tpu-")
        hosts = emit.hosts(TARGETS["tpu"]).count
        assert slice_name == emit.hosts(TARGETS["tpu"]).slice_name
    ips = [f"10.0.0.{index + 1}" for index in range(hosts)]
    jobs = []
    for rank in range(hosts):
        seen = {"SKYPILOT_NODE_RANK": str(rank), "SKYPILOT_NUM_NODES": str(hosts), "SKYPILOT_NODE_IPS": "\n".join(ips)}
        if kind == "tpu":
            # A Cloud TPU VM: acceltrain reads it first, and JAX the slice's hosts from the metadata server; what
            # SkyPilot says of the same host is the one job too (checked here as its reader reads it).
            found, _ = cluster.choose_processes("jax", {}, seen, cloud_tpu_vm=True,
                                                tpu_metadata={"accelerator-type": slice_name})
            assert (found.source, found.num_processes) == ("tpu", None), found
            said = environments.SkyPilot().read(environments.Host(seen))
            found = cluster.Processes("tpu", int(said.num_processes), int(said.process_id), said.coordinator)
        else:
            found, _ = cluster.choose_processes("jax", {}, seen, cloud_tpu_vm=False)
        jobs.append((found, found.coordinator))
    if kind == "gpu":
        model, _, count = accelerators.partition(":")
        return jobs, int(count)
    return jobs, {"tpu": 4}.get(kind) or _simulated(task["run"])


def _simulated(command: str) -> int:
    words = shlex.split(command.splitlines()[-1])
    return int(words[words.index("--simulate-devices") + 1]) if "--simulate-devices" in words else 1


def read_ray(text: str, kind: str):
    """A Ray job's driver: run_job's workers, each `acceltrain run` told its Ray Train rank, the world size and rank
    0's address (acceltrain.commands.ray_job.child_environment, as each worker sets it); on a TPU slice each worker
    runs on a Cloud TPU VM, whose own variables the Ray job's come before."""
    import ast

    from acceltrain.commands import ray_job

    call = next(node for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "run_job")
    command = ast.literal_eval(call.args[0])
    keywords = {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords}
    jobs = []
    for rank in range(keywords["workers"]):
        seen = ray_job.child_environment({}, keywords.get("env", {}), rank, keywords["workers"], "10.0.0.1:41000")
        found, _ = cluster.choose_processes("jax", {}, seen, cloud_tpu_vm=kind == "tpu",
                                            tpu_metadata={"accelerator-type": emit.hosts(TARGETS["tpu"]).slice_name})
        jobs.append((found, found.coordinator))
    per_process = (keywords.get("resources_per_worker", {}).get("TPU") or keywords.get("gpus_per_worker")
                   or _simulated(shlex.join(command)))
    return jobs, per_process


READERS = {"jobset": read_jobset, "sbatch": read_sbatch, "skypilot": read_skypilot, "ray": read_ray}


def test_the_issues_cpu_jobset_holds_4_processes_in_4_pods_each_told_4(tmp_path, monkeypatch):
    """`--emit jobset --target cpu --processes 2 --nodes 2` made 2 pods each told JOB_COMPLETIONS=4, a job that
    waited for ever for 2 peers, under a header of "2 host(s) x 0 CPUs"."""
    monkeypatch.chdir(tmp_path)
    text = emit.emit("jobset", "cpu", "train.py", processes=2, nodes=2, run_flags=("--simulate-devices", "2"))
    spec = yaml.safe_load(text)["spec"]["replicatedJobs"][0]["template"]["spec"]
    env = {item["name"]: item.get("value") for item in spec["template"]["spec"]["containers"][0]["env"]}
    assert spec["parallelism"] == spec["completions"] == 4 and env["JOB_COMPLETIONS"] == "4"
    assert text.splitlines()[0].endswith("cpu: 4 pod(s) x 2 CPU device(s), one process a pod (2 node(s) x 2 "
                                         "process(es)).")
    jobs, per_process = read_jobset(text, "cpu")
    assert per_process == 2
    assert_one_job(jobs, 4)
    assert jobset.check(text.replace("value: '4'", "value: '2'")) != []  # the old mismatch is named


def test_a_single_host_tpu_slice_is_one_process_on_each_engine(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "acceltrain"\n')
    jobs, chips = read_jobset(emit.emit("jobset", "tpu-v5e-8", "train.py"), "tpu")
    assert chips == 8
    assert_one_job(jobs, 1)
    with pytest.raises(UsageError, match="For a TPU slice pass --emit jobset"):
        emit.emit("sbatch", "tpu-v5e-8", "train.py")
