"""connect()'s and Runtime.fit's arguments checked before any framework starts, each error naming the argument (or,
under the CLI, the flag that carries it: errors.option): the cluster, the simulated devices, the platform, the
precision, the device data and the checkpoints; Runtime's calls' model, inputs and counts (before Keras sees them).
runtime.py calls them; Settings.check (the verbs' flags) and `acceltrain train` check with the same ones."""

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


def check_call(model, x, *, compiled: bool = False, replicas: int = 1, over: str = "") -> None:
    """Runtime.fit/evaluate/predict's model and inputs, before any layer reads them: a keras.Model (compiled, for
    fit and evaluate) and some inputs. Keras would say 'cannot create weak reference' or, for x=None, 'list index out
    of range' (fit) and 'pop from an empty set' (predict), naming neither."""
    check_model(model)
    if compiled and not getattr(model, "compiled", False):
        raise UsageError(f"Received a model that is not compiled: {model.name!r}. Call model.compile(optimizer=..., "
                         "loss=...) inside runtime.scope() before fit or evaluate.")
    _check_placed(model, replicas, over)
    if x is None:
        raise UsageError("Received x=None. Expected the inputs: numpy arrays (one, or a list or dict of them), a "
                         "tf.data.Dataset, a keras.utils.PyDataset, a generator or a Grain loader.")


def _check_placed(model, replicas: int, over: str) -> None:
    """A built model whose variables all lie on one device, called on a runtime of several replicas (`over`: its
    distribution's name): it was built outside runtime.scope(), and JAX keeps a variable where it was made. Keras's
    step said JAX's 'Received incompatible devices for jitted computation', naming neither the model nor the fix, and
    left the model's variables unreadable. A framework whose values have no `sharding` (TensorFlow) is left to it."""
    if replicas < 2:
        return
    devices = set()
    for variable in model.variables:
        devices |= set(getattr(getattr(variable.value, "sharding", None), "device_set", None) or ())
    if len(devices) == 1:
        raise UsageError(f"Received model {model.name!r}, whose variables lie on 1 device, on a runtime of {replicas} "
                         f"replicas ({over}): a model built outside runtime.scope() stays where it was made. Build "
                         "and compile it inside `with runtime.scope():`, or with runtime.build(make_model).")


def check_model(model, received: str = "") -> None:
    """A keras.Model where one is asked for: Runtime's calls' `model`, or what Runtime.build's function returned
    (`received`: how the error names it; default: model=...)."""
    import keras

    if not isinstance(model, keras.Model):
        received = received or f"model={_short(model)}"
        raise UsageError(f"Received {received} (of type {type(model).__name__}). Expected a keras.Model, built inside "
                         "runtime.scope() (or returned by the function runtime.build(make_model) calls).")


def callbacks_of(callbacks):
    """A call's callbacks: a list of those given, or a keras.callbacks.CallbackList the caller built, as it came (the
    layers that add acceltrain's own add them to it too: interception.Call.with_callback). Anything else said
    "'History' object is not iterable" (one callback, not in a list) or, from acceltrain's data path, "vars() argument
    must have __dict__ attribute" (a list holding something that is no callback)."""
    import keras

    if isinstance(callbacks, keras.callbacks.CallbackList):
        return callbacks
    given = list(callbacks) if isinstance(callbacks, (list, tuple)) else [] if callbacks is None else None
    strays = [item for item in given or () if not isinstance(item, keras.callbacks.Callback)]
    if given is None or strays:
        received = f"={_short(callbacks)}" if given is None else f": a list holding {_short(strays[0])}"
        raise UsageError(f"Received callbacks{received}. Expected a list of keras.callbacks.Callback objects, e.g. "
                         "callbacks=[keras.callbacks.EarlyStopping()], or a keras.callbacks.CallbackList.")
    return given


def check_fit_arguments(epochs, validation_split) -> None:
    """Runtime.fit's counts: Keras would fail on epochs='2' deep in its loop ("'>' not supported"), train on none for
    epochs=-1 without a word, and make an empty training set of validation_split=2 (a numpy error on its labels)."""
    import numbers

    if isinstance(epochs, bool) or not isinstance(epochs, numbers.Integral) or epochs < 0:
        raise UsageError(f"Received epochs={epochs!r}. Expected a whole number of at least 0 (the epoch to train "
                         "up to, as Keras's fit takes it), e.g. epochs=10.")
    if isinstance(validation_split, bool) or not isinstance(validation_split, numbers.Real) \
            or not 0 <= validation_split < 1:
        raise UsageError(f"Received validation_split={validation_split!r}. Expected a fraction from 0 up to, not "
                         "including, 1: the last part of the training samples held out, e.g. validation_split=0.1.")


def check_seed(seed, name: str = "seed") -> int:
    """Runtime.seed's seed (`name`: the argument, or --seed): what numpy's legacy seeding takes, which JAX's and
    TensorFlow's take too. numpy's own refusal ('Seed must be between 0 and 2**32 - 1') came as a traceback."""
    import numbers

    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2 ** 32:
        raise UsageError(f"Received {shown(name, seed)}. Expected a whole number from 0 to 4294967295 (2**32 - 1), "
                         f"e.g. {shown(name, 1)}.")
    return int(seed)


def _short(value) -> str:
    shown_value = repr(value)
    return shown_value if len(shown_value) <= 60 else shown_value[:57] + "..."
