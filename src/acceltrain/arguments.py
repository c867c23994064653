"""connect()'s and Runtime.fit's arguments checked before any framework starts, each error naming the argument (or,
under the CLI, the flag that carries it: errors.option): the cluster, the simulated devices, the platform, the
precision, the device data and the checkpoints. runtime.py calls them; Settings.check (the verbs' flags) and
`acceltrain train` check with the same ones."""

from acceltrain import decisions, hardware
from acceltrain.cluster import Cluster
from acceltrain.errors import UsageError, positive_int, shown
from acceltrain.options import Checkpoints

DEVICE_DATA = ("auto", "off")  # Runtime.keep_data_on_devices(...), --device-data


def check_device_data(value, name: str = "--device-data") -> str:
    """Runtime.keep_data_on_devices's setting (`name`: the argument or the flag it came from) checked."""
    if value not in DEVICE_DATA:
        raise UsageError(f"Received {shown(name, value)}. Valid: {', '.join(DEVICE_DATA)} (auto: a fit's in-memory arrays kept on "
                         "the devices where they fit; off: Keras's own input path, each batch sent from the host).")
    return value


def cluster_of(cluster) -> Cluster:
    """connect()'s cluster: an acceltrain.Cluster, or None (the job the environment describes: Cluster())."""
    if cluster is not None and not isinstance(cluster, Cluster):
        raise UsageError(f"Received cluster={cluster!r}. Valid: an acceltrain.Cluster, e.g. acceltrain.Cluster("
                         "coordinator='10.0.0.1:1234', num_processes=2, process_id=0), or None to read the job from "
                         "the environment.")
    return cluster or Cluster()


def check_precision(precision) -> None:
    if precision not in decisions.PRECISIONS:
        raise UsageError(f"Received precision={precision!r}. Valid: {', '.join(decisions.PRECISIONS)} (auto: bfloat16 "
                         "compute on TPUs and GPUs that run it natively, else float32).")


def check_simulate_devices(simulate_devices) -> None:
    if simulate_devices is not None:
        positive_int(simulate_devices, "simulate_devices", " (e.g. 8 to try an 8-device run on this CPU)")


def check_platform(platform, tpu, simulate_devices) -> str:
    """The platform asked for, checked against the other arguments; a TPU name asks for a TPU."""
    if platform not in ("auto", *hardware.PLATFORMS):
        raise UsageError(f"Received platform={platform!r}. Valid: auto, {', '.join(hardware.PLATFORMS)}.")
    if tpu is not None and platform not in ("auto", "tpu"):
        raise UsageError(f"Received tpu={tpu!r} with platform={platform!r}. A TPU name asks for a TPU: "
                         "pass one or the other.")
    platform = "tpu" if tpu is not None else platform
    if simulate_devices is not None and platform not in ("auto", "cpu"):
        raise UsageError(f"Received simulate_devices={simulate_devices} with platform={platform!r}. Simulated "
                         "devices are slices of the CPU: leave platform out, or drop simulate_devices.")
    return platform


def checkpoints_of(checkpoints, checkpoint_dir, resume, every, keep) -> Checkpoints | None:
    """Runtime.fit's checkpoints: the one value, or made from its keywords (both: refused)."""
    if checkpoints is None:
        return None if checkpoint_dir is None else Checkpoints.of(checkpoint_dir, every, keep, resume, here=True)
    if not isinstance(checkpoints, Checkpoints):
        raise UsageError(f"Received checkpoints={checkpoints!r}. Expected an acceltrain.Checkpoints, e.g. "
                         "acceltrain.Checkpoints('ckpt', every='200 steps'), or None.")
    given = {"checkpoint_dir": checkpoint_dir, "resume": resume or None, "checkpoint_every": every != "auto" or None,
             "keep_checkpoints": keep != 2 or None}
    also = [name for name, value in given.items() if value is not None]
    if also:
        raise UsageError(f"Received checkpoints= and {', '.join(also)}. Pass the one Checkpoints value (its dir, "
                         "every, keep and resume), or the keywords without it.")
    return checkpoints.check_writable()
