"""TPU VMs as they are, recorded: what each sets in the environment, which device files its chips
appear as, and what its metadata server says. Tests fake exactly these (device files, a libtpu
package, the metadata answer) and run connect() on them; there is no TPU here.

Sources (looked up 2026-12-03 with the project's search tool; what no source states is marked "assumed"):
- GKE: TPU_WORKER_ID and TPU_WORKER_HOSTNAMES are injected by GKE's webhook into the Pods of an
  Indexed Job on a multi-host TPU slice ("TPU_WORKER_HOSTNAMES: a comma-separated list of TPU VM
  hostnames ... ordered and zero indexed by the TPU_WORKER_ID"), quoted from the GCP documentation in
  https://beta.pkg.go.dev/github.com/abatilo/gke-tpu-env-injector; a v5litepod-16 slice has 4 TPU VMs
  of 4 chips (https://cloud.google.com/tpu/docs/tpus-in-gke). JAX reads the same two variables
  (jax/_src/clusters/cloud_tpu_cluster.py::GkeTpuCluster, jax 0.10.2 in this venv).
- Cloud TPU VMs: the slice is described by the GCE metadata server (instance attributes
  `accelerator-type`, `agent-worker-number`, `worker-network-endpoints`, `tpu-env`), which JAX queries
  unless TPU_SKIP_MDS_QUERY is set (cloud_tpu_cluster.py::GceTpuCluster, get_tpu_env_value); an ssh
  shell on the VM sets none of the TPU_* variables (assumed: JAX's fallback to the metadata shows that
  they may be absent). v5e chips appear as /dev/vfio/N, v4 chips as /dev/accel* (JAX's
  cloud_tpu_init.running_in_cloud_tpu_vm checks both; github.com/jax-ml/jax/issues/13260, 2024-02-06:
  "ls /dev shows no accelerators" on a v5e VM, where the chips are VFIO devices).
- Colab: TPU runtimes moved from TPU nodes (COLAB_TPU_ADDR, TPU_NAME=grpc://...; github.com/
  WassimBenzarti/colab-ssh/issues/18, 2020) to TPU VMs reached with TPUClusterResolver(tpu='local')
  (blog.gitcode.com/07ba8d84915ff83acb36542a059760b5.html, 2025-07-02); the v5e-1 runtime is one chip.
  COLAB_GPU is set and empty on TPU runtimes (github.com/khipu-ai/practicals-2023/pull/1, 2023-02-26).
  Which TPU_* variables Colab sets is not documented: none assumed, and its metadata server assumed
  not to answer (Colab is not a GCE TPU VM of the user's project).
- Kaggle: "TPU v5e-8" sessions run on TPU VMs (github.com/Kaggle/kaggle-cli/pull/1198 and issue 1197,
  2026-09-17: "TPU v5e-8 sessions run on TPU VMs ... /dev/accel* or torch_xla"). KAGGLE_KERNEL_RUN_TYPE
  is Kaggle's own variable (assumed value "Interactive"); TPU_ACCELERATOR_TYPE=v5litepod-8 is assumed.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TPUVM:
    name: str
    env: dict
    device_files: tuple[str, ...]  # relative to a fake /dev
    metadata: dict = field(default_factory=dict)  # what the metadata server answers; {} = no answer
    # Expected: the process count connect() decides (None: JAX reads it), and whether TensorFlow refuses.
    processes: str = "single"  # "single" | "tpu"
    num_processes: int | None = 1
    tensorflow_refused: bool = False


COLAB_V5E_1 = TPUVM("Colab v5e-1", {"COLAB_GPU": ""}, ("vfio/0",))
KAGGLE_V5E_8 = TPUVM("Kaggle v5e-8", {"KAGGLE_KERNEL_RUN_TYPE": "Interactive", "TPU_ACCELERATOR_TYPE": "v5litepod-8"},
                     tuple(f"vfio/{i}" for i in range(8)))
CLOUD_V4_8 = TPUVM("Cloud TPU VM v4-8", {}, tuple(f"accel{i}" for i in range(4)),
                   metadata={"accelerator-type": "v4-8"})
CLOUD_V5LITEPOD_16_WORKER_1 = TPUVM("Cloud v5litepod-16, worker 1", {}, tuple(f"vfio/{i}" for i in range(4)),
                                    metadata={"accelerator-type": "v5litepod-16"}, processes="tpu",
                                    num_processes=None, tensorflow_refused=True)
GKE_V5LITEPOD_16_WORKER_2 = TPUVM(
    "GKE v5litepod-16, Pod 2",
    {"TPU_WORKER_ID": "2",
     "TPU_WORKER_HOSTNAMES": ",".join(f"job-0-{i}.headless-svc" for i in range(4))},
    tuple(f"vfio/{i}" for i in range(4)), processes="tpu", num_processes=4, tensorflow_refused=True)
GKE_V5LITEPOD_4 = TPUVM("GKE v5litepod-4, one Pod", {"TPU_WORKER_ID": "0", "TPU_WORKER_HOSTNAMES": "job-0-0.svc"},
                        tuple(f"vfio/{i}" for i in range(4)))

ALL = (COLAB_V5E_1, KAGGLE_V5E_8, CLOUD_V4_8, CLOUD_V5LITEPOD_16_WORKER_1, GKE_V5LITEPOD_16_WORKER_2, GKE_V5LITEPOD_4)


def fake_host(vm: TPUVM, root) -> tuple[tuple[str, ...], str]:
    """Fake device files and a libtpu package under `root`. Returns (hardware.tpu.DEVICE_FILES patterns for
    them, the folder to put on sys.path so `libtpu` is importable)."""
    from pathlib import Path

    root = Path(root)
    for name in vm.device_files:
        (root / "dev" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "dev" / name).touch()
    (root / "site" / "libtpu").mkdir(parents=True, exist_ok=True)
    (root / "site" / "libtpu" / "__init__.py").write_text("# a stand-in: no TPU here\n")
    return (str(root / "dev" / "accel*"), str(root / "dev" / "vfio" / "[0-9]*")), str(root / "site")
