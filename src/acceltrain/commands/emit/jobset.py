"""A Kubernetes JobSet (jobset.x-k8s.io/v1alpha2): what GKE runs a multi-host TPU slice or GPU nodes as (xpk,
Cluster Toolkit and Kubeflow Trainer make the same).

One replicated job for the slice, parallelism = completions = its processes, one pod a process: a host of a
TPU slice or a GPU box (GKE's TPU node selectors `cloud.google.com/gke-tpu-accelerator`, `-topology` and
`google.com/tpu` chips, or `nvidia.com/gpu`), or on CPU each of --nodes x --processes. The restart rule is
xpk's less 127: a pod that exits with a code outside 42 and 128-255 (127: `acceltrain` not in the image) fails
its Job through the Job's podFailurePolicy, and that reason fails the JobSet; any other failure restarts the
whole JobSet, at most maxRestarts times. Optional: the pods' grace after SIGTERM (terminationGracePeriodSeconds),
Kueue's queue, a PriorityClass, exclusive placement over a topology (one slice a node pool). Checked against the
JobSet CRD's own schema (schemas/, with its source).
"""

import functools
import json
import re
from pathlib import Path

from acceltrain import decisions
from acceltrain.commands.emit import job as emit
from acceltrain.errors import UsageError

SHARED_DEFAULT = "/shared"  # where the pods mount the shared volume
SHARED_CLAIM = "acceltrain-shared"  # a ReadWriteMany PersistentVolumeClaim (Filestore, GCS FUSE, Lustre)
CONTAINER = "acceltrain"
SCHEMA = Path(__file__).parent / "schemas" / "jobset.x-k8s.io_jobsets.yaml"
KUBERNETES_GRACE_SECONDS = decisions.KUBERNETES_GRACE_SECONDS  # a pod's terminationGracePeriodSeconds when unset
# Kueue admits a JobSet labelled with its LocalQueue (kueue.sigs.k8s.io docs, "Run a JobSet"); JobSet's own
# exclusive placement puts each replicated Job alone in one domain of the node label named (jobset's
# api/jobset/v1alpha2/jobset_types.go::ExclusiveKey; GKE's TPU examples name cloud.google.com/gke-nodepool).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"


def check_options(grace_seconds=None, queue=None, priority_class=None, exclusive_topology=None) -> None:
    """The JobSet's optional settings, each as Kubernetes takes it, refused here rather than by the API server."""
    if grace_seconds is not None and (isinstance(grace_seconds, bool) or not isinstance(grace_seconds, int)
                                      or grace_seconds < 1):
        raise UsageError(f"Received --grace-period {grace_seconds!r}. Expected whole seconds, at least 1 (the time "
                         f"from SIGTERM to SIGKILL; Kubernetes's default is {KUBERNETES_GRACE_SECONDS}), e.g. "
                         "--grace-period 120, or a run's ledger (acceltrain run --ledger FILE.json) to size it from "
                         "its measured checkpoints.")
    if queue is not None and not _LABEL_VALUE.fullmatch(queue):
        raise UsageError(f"Received --queue {queue!r}. Expected a Kueue LocalQueue's name, a Kubernetes label value "
                         "(at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit), "
                         "e.g. --queue team-a.")
    if priority_class is not None and not _DNS_SUBDOMAIN.fullmatch(priority_class):
        raise UsageError(f"Received --priority-class {priority_class!r}. Expected a PriorityClass's name (lowercase "
                         "letters, digits, '-' and '.', at most 253), e.g. --priority-class high-priority.")
    if exclusive_topology is not None and not _LABEL_KEY.fullmatch(exclusive_topology):
        raise UsageError(f"Received --exclusive-topology {exclusive_topology!r}. Expected a node label's key, "
                         "e.g. --exclusive-topology cloud.google.com/gke-nodepool (one slice a node pool).")


def grace(given) -> tuple[int | None, str]:
    """--grace-period as given (None, whole seconds, or a run's ledger FILE.json): (seconds or None, how it was set)."""
    if given is None:
        return None, f"Kubernetes's default {KUBERNETES_GRACE_SECONDS} s (--grace-period SECONDS or a run's --ledger " \
                     "FILE.json for a longer save)"
    if isinstance(given, str) and given.strip().isdigit():
        given = int(given)
    if not isinstance(given, str):
        check_options(grace_seconds=given)
        return given, f"{given} s (--grace-period)"
    path = Path(given)
    try:
        ledger = json.loads(path.read_text())
        seconds, count = float(ledger["parts"]["checkpoint"]), int(ledger.get("checkpoints", 0))
    except (OSError, ValueError, KeyError, TypeError):
        check_options(grace_seconds=given)  # neither seconds nor a ledger: said as seconds, with the ledger's form
        raise
    chosen, why = decisions.choose_grace(seconds, count)
    return chosen, f"{chosen} s, sized from {path.name}: {why}"


_LABEL_VALUE = re.compile(r"(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_KEY = re.compile(rf"({_DNS_SUBDOMAIN.pattern}/)?{_LABEL_VALUE.pattern}")


def check_hosts(hosts: emit.Hosts) -> None:
    if hosts.kind == "tpu" and hosts.version not in emit.GKE_TPU_ACCELERATORS:
        raise UsageError(f"Received --target {hosts.target} with --emit jobset: GKE offers TPU "
                         f"{', '.join(emit.GKE_TPU_ACCELERATORS)} (and newer), not {hosts.version}, which runs on "
                         "Cloud TPU VMs only. Pass a GKE generation (e.g. tpu-v5e-16), or --emit skypilot.")
    if hosts.kind == "tpu" and hosts.topology == "1x2":
        raise UsageError(f"Received --target {hosts.target} with --emit jobset: GKE has no {hosts.version} node "
                         "of 2 chips (its topologies are 1x1, 2x2, 2x4, 4x4 ...). Pass tpu-v5e-1 or tpu-v5e-4.")


def document(job: emit.Job) -> dict:
    """The JobSet as plain data (the YAML is its dump)."""
    hosts = job.hosts
    pods = hosts.processes  # one process a pod: JOB_COMPLETION_INDEX is the process's id
    resources, selector, tolerations = {}, {}, []
    if hosts.kind == "tpu":
        resources = {"google.com/tpu": hosts.chips_per_host}
        selector = {"cloud.google.com/gke-tpu-accelerator": emit.GKE_TPU_ACCELERATORS[hosts.version],
                    "cloud.google.com/gke-tpu-topology": hosts.topology}
        tolerations = [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    elif hosts.kind == "gpu":
        resources = {"nvidia.com/gpu": hosts.chips_per_host}
        selector = {"cloud.google.com/gke-accelerator": emit.GKE_GPUS[hosts.version]}
        tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    env = [
        # What connect() reads in a JobSet pod (environments.IndexedJob); Kubernetes sets JOB_COMPLETION_INDEX.
        {"name": "JOBSET_NAME",
         "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"}}},
        {"name": "JOB_COMPLETIONS", "value": str(pods)},
        {"name": "JAX_COMPILATION_CACHE_DIR", "value": job.compile_cache_dir},
    ]
    container = {
        "name": CONTAINER,
        "image": job.image,
        "command": ["bash", "-c", emit.Literal(job.script)],
        "env": env,
        "volumeMounts": [{"name": "shared", "mountPath": SHARED_DEFAULT}],
    }
    if resources:
        container["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    pod = {"restartPolicy": "Never", "containers": [container],
           "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": SHARED_CLAIM}}]}
    if job.grace_seconds is not None:
        pod["terminationGracePeriodSeconds"] = job.grace_seconds
    if job.priority_class is not None:
        pod["priorityClassName"] = job.priority_class
    if selector:
        pod["nodeSelector"] = selector
    if tolerations:
        pod["tolerations"] = tolerations
    restart_codes = emit.Flow(emit.RESTART_EXIT_CODES)
    metadata = {"name": job.name, "labels": {"app.kubernetes.io/created-by": "acceltrain"}}
    if job.queue is not None:
        metadata["labels"][QUEUE_LABEL] = job.queue
    if job.exclusive_topology is not None:
        metadata["annotations"] = {EXCLUSIVE_TOPOLOGY: job.exclusive_topology}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "failurePolicy": {
                "maxRestarts": job.max_restarts,
                "rules": [{"name": "failOnOtherExitCodes", "action": "FailJobSet",
                           "onJobFailureReasons": ["PodFailurePolicy"]}],
            },
            "replicatedJobs": [{
                "name": "slice",
                "replicas": 1,
                "template": {"spec": {
                    "parallelism": pods,
                    "completions": pods,
                    "completionMode": "Indexed",
                    "backoffLimit": 0,
                    "podFailurePolicy": {"rules": [{
                        "action": "FailJob",
                        "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": restart_codes},
                    }]},
                    "template": {"spec": pod},
                }},
            }],
        },
    }


def render(job: emit.Job) -> str:
    hosts = job.hosts
    if hosts.kind == "cpu":
        where = (f"{hosts.processes} pod(s) x {job.devices_per_process} CPU device(s), one process a pod "
                 f"({hosts.count} node(s) x {hosts.processes_per_host} process(es))")
    else:
        where = (f"{hosts.count} host(s) x {hosts.chips_per_host} {'chips' if hosts.kind == 'tpu' else 'GPUs'}, "
                 f"one pod a host{f' ({hosts.slice_name}, topology {hosts.topology})' if hosts.kind == 'tpu' else ''}")
    head = (f"# acceltrain launch --emit jobset --target {hosts.target}: {where}.\n"
            f"# Exit 42 or 128-255 restarts the JobSet (at most {job.max_restarts} times); any other failure is "
            "final, 127 (no acceltrain in the image) included.\n"
            f"# On SIGTERM each process saves a checkpoint and exits 42 within the pods' grace: {job.grace_reason}.\n"
            f"# The pods mount the PersistentVolumeClaim {SHARED_CLAIM} (ReadWriteMany) at {SHARED_DEFAULT}.\n"
            "# Submit: kubectl apply -f THIS.yaml   Check an edit: acceltrain doctor --artifact THIS.yaml\n")
    return head + emit.dump_yaml(document(job))


def recognizes(text: str) -> bool:
    return "kind: JobSet" in text


def check(text: str) -> list[str]:
    """What is wrong with a JobSet: the CRD schema's errors, then acceltrain's own conventions."""
    document, problems = emit.load_yaml_mapping(text)
    if document is None:
        return problems
    problems = [f"{'/'.join(map(str, error.absolute_path)) or '(top)'}: {error.message}"
                for error in _validator().iter_errors(document)]
    if problems:
        return problems
    for index, replicated in enumerate(document["spec"]["replicatedJobs"]):
        spec = replicated["template"].get("spec", {})
        where = f"spec/replicatedJobs/{index} ({replicated['name']})"
        if spec.get("parallelism") != spec.get("completions"):
            problems.append(f"{where}: parallelism {spec.get('parallelism')} and completions "
                            f"{spec.get('completions')} differ; one pod a host needs both equal to the hosts")
        pod = spec.get("template", {}).get("spec", {})
        for container in pod.get("containers", []):
            told = [env.get("value") for env in container.get("env", []) if env.get("name") == "JOB_COMPLETIONS"]
            if told and told[0] != str(spec.get("completions")):
                problems.append(f"{where}: container {container['name']} is told JOB_COMPLETIONS={told[0]} of "
                                f"completions {spec.get('completions')}: each process would wait for peers that "
                                "never start; set both to the job's processes")
            if container.get("image") == emit.IMAGE_PLACEHOLDER:
                problems.append(f"{where}: container {container['name']}'s image is still {emit.IMAGE_PLACEHOLDER}; "
                                "put an image with acceltrain and your script")
            limits = container.get("resources", {}).get("limits", {})
            selector = pod.get("nodeSelector", {})
            if "google.com/tpu" in limits and "cloud.google.com/gke-tpu-topology" not in selector:
                problems.append(f"{where}: google.com/tpu without the cloud.google.com/gke-tpu-topology node "
                                "selector; GKE would not place the pods on one slice")
        rules = spec.get("podFailurePolicy", {}).get("rules", [])
        if not any(rule.get("onExitCodes", {}).get("operator") == "NotIn" and 42 in rule["onExitCodes"].get("values", [])
                   for rule in rules):
            problems.append(f"{where}: no podFailurePolicy rule spares exit code 42: a job that checkpointed on a "
                            "notice would not be restarted")
    return problems


@functools.lru_cache(maxsize=1)
def _validator():
    """The CRD's schema, read and built once (seconds each time: it is 10,000 lines)."""
    import jsonschema
    import yaml

    crd = yaml.safe_load(SCHEMA.read_text())
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2")["schema"]["openAPIV3Schema"]
    return jsonschema.Draft7Validator(schema)
