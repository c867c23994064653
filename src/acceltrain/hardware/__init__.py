"""What hardware is there, and which to use.

One module per kind (tpu, gpu, cpu) holds what is particular to it. `KINDS` is the 'auto' order:
the first kind with a device wins, so the order *is* the priority.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from acceltrain.errors import UsageError
from acceltrain.hardware import cpu, gpu, tpu

KINDS = (tpu, gpu, cpu)
PLATFORMS = tuple(kind.NAME for kind in KINDS)


@dataclass(frozen=True)
class Hardware:
    """What connect() found: plain data, so decisions about it are testable with no hardware."""

    platform: str  # "tpu" | "gpu" | "cpu"
    device_kind: str  # e.g. "TPU v5 lite", "NVIDIA H200", "cpu"
    devices: tuple[str, ...]  # e.g. ("cpu:0", "cpu:1")
    simulated: bool = False  # CPU split into devices by simulate_devices=N
    num_processes: int = 1
    process_index: int = 0

    @property
    def num_devices(self) -> int:
        return len(self.devices)


def choose_platform(device_counts: Mapping[str, int], requested: str = "auto") -> tuple[str, str]:
    """The platform asked for, else the best with at least one device, and why: TPU, then GPU, then CPU."""
    if requested != "auto":
        count = device_counts.get(requested, 0)
        if count > 0:
            return requested, f"asked for; {count} found"
        found = ", ".join(f"{n} {name.upper()}" for name, n in device_counts.items() if n) or "nothing"
        raise UsageError(
            f"Received platform={requested!r}, but the backend sees no {requested.upper()} device (it sees: "
            f"{found}). Run where there is one, or pass platform='auto' to use the best there is."
        )
    for kind in KINDS:
        count = device_counts.get(kind.NAME, 0)
        if count > 0:
            return kind.NAME, f"{count} {kind.NAME.upper()} device{'s' * (count > 1)} found"
    # Every backend has a CPU; reaching here means the backend reported none, which is a bug.
    raise RuntimeError(f"No device found on any platform: {dict(device_counts)}")


def kind(platform: str):
    """The module of a platform by name ("tpu" | "gpu" | "cpu")."""
    for module in KINDS:
        if module.NAME == platform:
            return module
    raise ValueError(f"Unknown platform: {platform!r}. Valid: {', '.join(PLATFORMS)}")
