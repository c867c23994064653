"""Engines' environments as each documents them, recorded: what a process of a job sees, and what
connect() must make of it. Sources (looked up 2026-12-03 with the project's search and fetch tools):

- JobSet: kubernetes-sigs/jobset site/static/examples/pytorch/cnn-mnist/mnist.yaml (commit 08dfbdf): a
  JobSet `pytorch` with replicatedJob `workers`, parallelism = completions = 4; process 0 is
  "pytorch-workers-0-0.pytorch"; the rank is the pod's `batch.kubernetes.io/job-completion-index`, which an
  Indexed Job also exports as JOB_COMPLETION_INDEX. JOBSET_NAME from the `jobset.sigs.k8s.io/jobset-name`
  annotation as in site/static/examples/in-place-restart/jobset-main-container-mode.yaml; JOB_COMPLETIONS is
  what `acceltrain launch --emit jobset` adds (Kubernetes keeps completions in the Job's spec only).
  HOSTNAME: Kubernetes sets it to the pod's hostname, `<job name>-<index>` in an Indexed Job.
- Kubeflow Trainer's JAX runtime: kubeflow/website content/en/docs/components/trainer/user-guides/jax.md,
  "Environment Variables Injected by the JAX Runtime": JAX_NUM_PROCESSES, JAX_PROCESS_ID,
  JAX_COORDINATOR_ADDRESS. The docs name the variables, not a value: the address below is assumed, in the
  form of a JobSet pod's name (the runtime is built on JobSet).
- SkyPilot: docs.skypilot.co/en/stable/running-jobs/distributed-jobs.html: SKYPILOT_NODE_IPS (one a line,
  "head -n1" is the head), SKYPILOT_NODE_RANK, SKYPILOT_NUM_NODES, SKYPILOT_NUM_GPUS_PER_NODE; the IPs are
  assumed (private addresses).
- Ray Train: ray-project/ray python/ray/train/v2/jax/config.py: JaxTrainer's backend calls
  jax.distributed.initialize on every worker before the user's function runs; connect() then finds a job
  already started (recorded as the started (count, index) pair). Ray's own variables are not read.
- A Ray job `acceltrain launch --emit ray` wrote (acceltrain.commands.ray_job): each worker's `acceltrain run`
  child gets ray.train.get_context()'s world rank and size and rank 0's address as ACCELTRAIN_RAY_*; Ray's own
  RAY_ADDRESS is there too (a worker of a Ray cluster), the address assumed.
- Pathways on Cloud: docs.cloud.google.com/ai-hypercomputer/docs/workloads/pathways-on-cloud/
  porting-jax-workloads: "setting the JAX_PLATFORMS=proxy environment variable", "jax.process_index() is
  always 0". JAX_BACKEND_TARGET's value is assumed (the IFRT proxy's gRPC address).
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Recorded:
    name: str
    env: dict
    started: tuple | None = None  # a jax.distributed job already started in the process
    cloud_tpu_vm: bool = False
    # Expected
    source: str = "single"
    num_processes: int | None = 1
    process_id: int | None = 0
    coordinator: str | None = None
    distributed: bool = False
    says: tuple = field(default_factory=tuple)  # in the reason the banner prints


JOBSET_POD_2 = Recorded(
    "JobSet pytorch, workers pod 2 of 4",
    {"JOB_COMPLETION_INDEX": "2", "HOSTNAME": "pytorch-workers-0-2", "JOBSET_NAME": "pytorch",
     "JOB_COMPLETIONS": "4", "KUBERNETES_SERVICE_HOST": "10.96.0.1"},
    source="jobset", num_processes=4, process_id=2, coordinator="pytorch-workers-0-0.pytorch:55527",
    distributed=True, says=("JobSet pod (pytorch-workers-0-2", "JOB_COMPLETIONS=4"))
INDEXED_JOB_ALONE = Recorded(
    "an Indexed Job pod of independent tasks",
    {"JOB_COMPLETION_INDEX": "3", "HOSTNAME": "sweep-3", "KUBERNETES_SERVICE_HOST": "10.96.0.1"},
    says=("Indexed Job pod (JOB_COMPLETION_INDEX=3)", "one process"))
KUBEFLOW_PROCESS_1 = Recorded(
    "Kubeflow TrainJob jax-example, process 1 of 2",
    {"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1", "JAX_COORDINATOR_ADDRESS": "jax-example-node-0-0.jax-example:6666",
     "JOB_COMPLETION_INDEX": "1", "HOSTNAME": "jax-example-node-0-1"},
    source="kubeflow", num_processes=2, process_id=1, coordinator="jax-example-node-0-0.jax-example:6666",
    distributed=True, says=("Kubeflow Trainer",))
SKYPILOT_NODE_1 = Recorded(
    "SkyPilot num_nodes: 2, node 1",
    {"SKYPILOT_NODE_RANK": "1", "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NODE_IPS": "10.128.0.5\n10.128.0.6\n",
     "SKYPILOT_NUM_GPUS_PER_NODE": "8"},
    source="skypilot", num_processes=2, process_id=1, coordinator="10.128.0.5:55527", distributed=True,
    says=("SkyPilot: node 1 of 2",))
SKYPILOT_ONE_NODE = Recorded(
    "SkyPilot num_nodes: 1",
    {"SKYPILOT_NODE_RANK": "0", "SKYPILOT_NUM_NODES": "1", "SKYPILOT_NODE_IPS": "10.128.0.5"},
    says=("SkyPilot: node 0 of 1",))
RAY_WORKER_3 = Recorded(
    "Ray Train JaxTrainer, worker 3 of 4", {"RAY_ADDRESS": "10.0.0.2:6379"}, started=(4, 3),
    source="started", num_processes=4, process_id=3, distributed=True, says=("Ray Train's JaxTrainer",))
RAY_JOB_WORKER_1 = Recorded(
    "a Ray job acceltrain emitted, worker 1 of 2",
    {"ACCELTRAIN_RAY_WORLD_RANK": "1", "ACCELTRAIN_RAY_WORLD_SIZE": "2",
     "ACCELTRAIN_RAY_COORDINATOR": "10.0.0.2:41234", "RAY_ADDRESS": "10.0.0.2:6379"},
    source="ray", num_processes=2, process_id=1, coordinator="10.0.0.2:41234", distributed=True,
    says=("Ray Train: worker 1 of 2",))
PATHWAYS_HEAD = Recorded(
    "Pathways proxy head", {"JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": "grpc://pathways-proxy:29000",
                            "JOB_COMPLETION_INDEX": "0", "HOSTNAME": "pw-head-0-0"},
    source="pathways", says=("Pathways's proxy backend", "grpc://pathways-proxy:29000", "no jax.distributed"))
GKE_TPU_POD_IN_A_JOBSET = Recorded(
    "GKE v5litepod-16 JobSet, pod 1 (the TPU webhook's variables win over the Indexed Job's)",
    {"TPU_WORKER_ID": "1", "TPU_WORKER_HOSTNAMES": ",".join(f"train-slice-0-{i}.train" for i in range(4)),
     "JOB_COMPLETION_INDEX": "1", "HOSTNAME": "train-slice-0-1", "JOBSET_NAME": "train", "JOB_COMPLETIONS": "4"},
    cloud_tpu_vm=True, source="tpu", num_processes=4, process_id=1, distributed=True, says=("TPU slice of 4 hosts",))

ALL = (JOBSET_POD_2, INDEXED_JOB_ALONE, KUBEFLOW_PROCESS_1, SKYPILOT_NODE_1, SKYPILOT_ONE_NODE, RAY_WORKER_3,
       RAY_JOB_WORKER_1, PATHWAYS_HEAD, GKE_TPU_POD_IN_A_JOBSET)
