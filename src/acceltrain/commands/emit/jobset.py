"""A Kubernetes JobSet (jobset.x-k8s.io/v1alpha2): what GKE runs a multi-host TPU slice or GPU nodes as (xpk,
Cluster Toolkit and Kubeflow Trainer make the same).

One replicated job for the slice, parallelism = completions = its hosts, one pod a host: GKE's TPU node
selectors (`cloud.google.com/gke-tpu-accelerator`, `-topology`) and `google.com/tpu` chips, or
`nvidia.com/gpu`. The restart rule is xpk's: a pod that exits with a code outside 42 and 127-255 fails its Job
through the Job's podFailurePolicy, and that reason fails the JobSet; any other failure restarts the whole
JobSet, at most maxRestarts times. Checked against the JobSet CRD's own schema (schemas/, with its source).
"""

from pathlib import Path

from acceltrain.commands.emit import job as emit
from acceltrain.errors import UsageError

SHARED_DEFAULT = "/shared"  # where the pods mount the shared volume
SHARED_CLAIM = "acceltrain-shared"  # a ReadWriteMany PersistentVolumeClaim (Filestore, GCS FUSE, Lustre)
CONTAINER = "acceltrain"
SCHEMA = Path(__file__).parent / "schemas" / "jobset.x-k8s.io_jobsets.yaml"


def check_layout(layout: emit.Layout) -> None:
    if layout.kind == "tpu" and layout.version not in emit.GKE_TPU_ACCELERATORS:
        raise UsageError(f"Received --target {layout.target} with --emit jobset: GKE offers TPU "
                         f"{', '.join(emit.GKE_TPU_ACCELERATORS)} (and newer), not {layout.version}, which runs on "
                         "Cloud TPU VMs only. Pass a GKE generation (e.g. tpu-v5e-16), or --emit skypilot.")
    if layout.kind == "tpu" and layout.topology == "1x2":
        raise UsageError(f"Received --target {layout.target} with --emit jobset: GKE has no {layout.version} node "
                         "of 2 chips (its topologies are 1x1, 2x2, 2x4, 4x4 ...). Pass tpu-v5e-1 or tpu-v5e-4.")


def document(job: emit.Job) -> dict:
    """The JobSet as plain data (the YAML is its dump)."""
    layout = job.layout
    hosts = layout.hosts
    resources, selector, tolerations = {}, {}, []
    if layout.kind == "tpu":
        resources = {"google.com/tpu": layout.chips_per_host}
        selector = {"cloud.google.com/gke-tpu-accelerator": emit.GKE_TPU_ACCELERATORS[layout.version],
                    "cloud.google.com/gke-tpu-topology": layout.topology}
        tolerations = [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    elif layout.kind == "gpu":
        resources = {"nvidia.com/gpu": layout.chips_per_host}
        selector = {"cloud.google.com/gke-accelerator": emit.GKE_GPUS[layout.version]}
        tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    env = [
        # What connect() reads in a JobSet pod (environments.IndexedJob); Kubernetes sets JOB_COMPLETION_INDEX.
        {"name": "JOBSET_NAME",
         "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"}}},
        {"name": "JOB_COMPLETIONS", "value": str(hosts * layout.processes_per_host)},
        {"name": "JAX_COMPILATION_CACHE_DIR", "value": job.compile_cache_dir},
    ]
    container = {
        "name": CONTAINER,
        "image": job.image,
        "command": ["bash", "-c", emit.Literal(job.command)],
        "env": env,
        "volumeMounts": [{"name": "shared", "mountPath": SHARED_DEFAULT}],
    }
    if resources:
        container["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    pod = {"restartPolicy": "Never", "containers": [container],
           "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": SHARED_CLAIM}}]}
    if selector:
        pod["nodeSelector"] = selector
    if tolerations:
        pod["tolerations"] = tolerations
    restart_codes = emit.Flow(emit.RESTART_EXIT_CODES)
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": job.name, "labels": {"app.kubernetes.io/created-by": "acceltrain"}},
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
                    "parallelism": hosts,
                    "completions": hosts,
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
    layout = job.layout
    head = (f"# acceltrain launch --emit jobset --target {layout.target}: {layout.hosts} host(s) x "
            f"{layout.chips_per_host} {'chips' if layout.kind == 'tpu' else 'GPUs' if layout.kind == 'gpu' else 'CPUs'}"
            f"{f' ({layout.slice_name}, topology {layout.topology})' if layout.kind == 'tpu' else ''}.\n"
            f"# Exit 42 or 127-255 restarts the JobSet (at most {job.max_restarts} times); any other failure is final.\n"
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


def _validator():
    import jsonschema
    import yaml

    crd = yaml.safe_load(SCHEMA.read_text())
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2")["schema"]["openAPIV3Schema"]
    return jsonschema.Draft7Validator(schema)
