"""What `acceltrain plan --target NAME` plans for: chips, memory per device, peak FLOP/s, and the topology
libtpu's compile-only client builds for it. Plain data: no framework here.

Names are the ones the hardware is rented under: Cloud TPU accelerator types (`v5litepod-8`, `v4-128`,
with or without a `tpu-` prefix) and GPU boxes (`h100-8`). A JAX device is a chip from v4 on; on v2 and v3
it is one of a chip's two TensorCores, and v2, v3, v4 and v5p names count TensorCores (v4-8 is 4 chips),
while v5e and v6e names count chips.

Sources, looked up 2026-12-03 (Cloud TPU pages through the project's search corpus):
  v3:  https://cloud.google.com/tpu/docs/v3   "123 teraflops (bf16)" and "32 GiB" per chip, 2 TensorCores
  v4:  https://cloud.google.com/tpu/docs/v4   "275 teraflops (bf16 or int8)", "32 GiB" per chip
  v5e: https://docs.cloud.google.com/tpu/docs/v5e   "197 TFLOPs" (bf16), "16 GB" HBM2 per chip
  v5p: https://cloud.google.com/tpu/docs/v5p   "459 TFLOPs" (bf16), "95 GB" HBM2e per chip
  v6e: https://docs.cloud.google.com/tpu/docs/v6e   "918 TFLOPs" (bf16), "32 GB" per chip
  v2:  45 TFLOP/s and 16 GiB per chip (8 GiB per TensorCore): Jouppi et al., "A Domain-Specific
       Supercomputer for Training Deep Neural Networks", CACM 63(7), 2020, which
       https://docs.cloud.google.com/tpu/docs/v2 points to (not re-read today).
  GPUs: NVIDIA's datasheets, as hardware/gpu.py: H100 SXM 80 GB, A100 SXM 80 GB, H200 SXM 141 GB.
  GPU compute capability (looked up 2026-12-04): https://developer.nvidia.com/cuda-gpus  "9.0 | NVIDIA GH200
       NVIDIA H200 NVIDIA H100"; the A100's 8.0 (Ampere, the first with bfloat16 tensor cores) was not in the part
       of that table read today: it is the Ampere data-center part's, as NVIDIA's forum and other tables give it.
HBM is counted in GiB for TPUs (the v3 and v4 pages say GiB; HBM stacks come in binary sizes, the newer
pages round to "GB"), in the datasheets' decimal GB for GPUs (the smaller of the two readings).
The peak FLOP/s per device are hardware/tpu.py's and hardware/gpu.py's tables (bfloat16, dense).
"""

import re
from dataclasses import dataclass

from acceltrain.errors import UsageError
from acceltrain.hardware import gpu, tpu

GIB = 1024**3
GB = 1000**3


@dataclass(frozen=True)
class Family:
    device_kind: str  # JAX's device_kind: the key of hardware/tpu.py's and gpu.py's peak tables
    memory_per_device: int  # bytes
    cores_in_name: bool  # the rental name counts TensorCores (2 per chip), not chips
    devices_per_chip: int  # JAX devices per chip: 2 on v2/v3, else 1
    topology_prefix: str | None  # get_topology_desc's version name; None: no compile-only client
    topology_dims: int  # 2-D (v2, v3, v5e, v6e) or 3-D (v4, v5p) torus
    largest: int  # the most chips a slice has
    compute_capability: str | None = None  # a GPU's CUDA compute capability: whether it runs bfloat16 natively


TPU_FAMILIES = {
    "v2": Family("TPU v2", 8 * GIB, True, 2, "v2", 2, 256),
    "v3": Family("TPU v3", 16 * GIB, True, 2, "v3", 2, 1024),
    "v4": Family("TPU v4", 32 * GIB, True, 1, "v4", 3, 4096),
    "v5p": Family("TPU v5", 95 * GIB, True, 1, "v5p", 3, 8960),
    "v5e": Family("TPU v5 lite", 16 * GIB, False, 1, "v5e", 2, 256),
    "v6e": Family("TPU v6 lite", 32 * GIB, False, 1, "v6e", 2, 256),
}
TPU_ALIASES = {"v5litepod": "v5e", "v5lite": "v5e"}

GPU_FAMILIES = {
    "h100": Family("NVIDIA H100 80GB HBM3", 80 * GB, False, 1, None, 0, 8, compute_capability="9.0"),
    "a100": Family("NVIDIA A100-SXM4-80GB", 80 * GB, False, 1, None, 0, 8, compute_capability="8.0"),
    "h200": Family("NVIDIA H200", 141 * GB, False, 1, None, 0, 8, compute_capability="9.0"),
}

EXAMPLES = ("tpu-v2-8", "tpu-v3-8", "tpu-v4-8", "tpu-v5e-1", "tpu-v5e-4", "tpu-v5e-8", "tpu-v5e-16", "v5litepod-8",
            "tpu-v5p-8", "tpu-v6e-8", "tpu-v4-128", "h100-8", "a100-8", "h200-8", "here")


@dataclass(frozen=True)
class Target:
    name: str
    kind: str  # "tpu" | "gpu" | "here"
    device_kind: str
    devices: int  # JAX devices the job runs on
    device_memory_bytes: int | None
    peak_flops_per_device: float | None  # bfloat16, published; None where there is none
    topology: str | None  # the compile-only topology; None: no compiler for it here (an estimate)
    topology_note: str = ""  # how the topology stands in for the target, where it is not exact
    compute_capability: str | None = None  # a GPU target's CUDA compute capability; None elsewhere


def resolve(name: str) -> Target:
    """The target named `name`, or a UsageError listing valid names."""
    text = str(name).strip().lower()
    if text == "here":
        return Target("here", "here", "", 0, None, None, None)
    match = re.fullmatch(r"(?:tpu-)?(v\d+[a-z]*)-(\d+)", text)
    if match and (TPU_ALIASES.get(match.group(1), match.group(1)) in TPU_FAMILIES):
        return _tpu(name, TPU_ALIASES.get(match.group(1), match.group(1)), int(match.group(2)))
    match = re.fullmatch(r"([a-z]\d+)-(\d+)", text)
    if match and match.group(1) in GPU_FAMILIES:
        return _gpu(name, match.group(1), int(match.group(2)))
    raise UsageError(f"Received --target {name!r}. Valid: {', '.join(EXAMPLES)} (TPU slices of other sizes too, "
                     "e.g. tpu-v5e-32 or tpu-v4-256). Pass a name as Cloud TPU or a GPU box is rented under.")


def rental_name(device_kind: str, num_devices: int) -> str | None:
    """The --target name of `num_devices` JAX devices of `device_kind` ("TPU v5 lite", 8 -> "tpu-v5e-8"), or
    None where there is none (a CPU, a kind not in the tables, a count no slice or box has)."""
    name = None
    for version, family in TPU_FAMILIES.items():
        if device_kind in (family.device_kind, f"TPU {version}"):
            chips = num_devices // family.devices_per_chip
            name = f"tpu-{version}-{chips * 2 if family.cores_in_name else chips}"
            break
    else:
        for model in GPU_FAMILIES:
            if model in device_kind.lower():
                name = f"{model}-{num_devices}"
                break
    try:
        return resolve(name).name if name else None
    except UsageError:
        return None


def _tpu(name: str, version: str, count: int) -> Target:
    family = TPU_FAMILIES[version]
    chips = count // 2 if family.cores_in_name else count
    unit = "TensorCores" if family.cores_in_name else "chips"
    if chips < 1 or (family.cores_in_name and count % 2) or chips > family.largest or chips & (chips - 1):
        sizes = [n * (2 if family.cores_in_name else 1) for n in _powers_of_two(family.largest)]
        if family.cores_in_name:
            sizes = [s for s in sizes if s >= 8]
        raise UsageError(f"Received --target {name!r}: {version} slices count {unit}, and {count} is not one. "
                         f"Valid: {', '.join(f'tpu-{version}-{s}' for s in sizes[:8])} ... up to {sizes[-1]}.")
    topology, note = _topology(family, chips)
    peak = tpu.peak_flops_per_second(family.device_kind, "bfloat16")
    return Target(name, "tpu", family.device_kind, chips * family.devices_per_chip, family.memory_per_device, peak,
                  topology, note)


def _gpu(name: str, model: str, count: int) -> Target:
    family = GPU_FAMILIES[model]
    if not 1 <= count <= family.largest:
        raise UsageError(f"Received --target {name!r}: a {model.upper()} box holds 1 to {family.largest} GPUs. "
                         f"Pass e.g. {model}-8.")
    peak = gpu.peak_flops_per_second(family.device_kind.split("-")[0], "bfloat16")
    return Target(name, "gpu", family.device_kind, count, family.memory_per_device, peak, None,
                  compute_capability=family.compute_capability)


def _topology(family: Family, chips: int) -> tuple[str, str]:
    """get_topology_desc's name for `chips` chips. libtpu refuses a 1x1 v5e/v6e slice with its default
    bounds, so one chip is planned as one device of a 2x2 slice: a one-device program is the same there."""
    if family.topology_dims == 2:
        if chips == 1:
            return f"{family.topology_prefix}:2x2", "one chip of a 2x2 slice (libtpu refuses a 1x1 topology)"
        if chips == 2:
            return f"{family.topology_prefix}:1x2", ""
        side = 1 << ((chips.bit_length() - 1) // 2)
        return f"{family.topology_prefix}:{side}x{chips // side}", ""
    if chips < 4:
        return f"{family.topology_prefix}:2x2x1", f"{chips} chip(s) of a 2x2x1 slice"
    dims = [2, 2, 1]
    while dims[0] * dims[1] * dims[2] < chips:
        smallest = min(range(3), key=lambda axis: (dims[axis], -axis))
        dims[smallest] *= 2
    return f"{family.topology_prefix}:{'x'.join(map(str, dims))}", ""


def _powers_of_two(largest: int) -> list[int]:
    return [1 << i for i in range(largest.bit_length()) if 1 << i <= largest]
