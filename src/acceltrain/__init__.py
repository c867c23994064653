"""acceltrain: train any Keras 3 model on whatever hardware is there (TPU, GPUs, CPU) in one call."""

from acceltrain import ledger  # noqa: F401  first: its clock is the interpreter's start (ledger.INTERPRETER_STARTED)
from acceltrain import backends
from acceltrain.cluster import Cluster
from acceltrain.errors import AcceltrainError, TrainingDiverged, UsageError
from acceltrain.options import Checkpoints
from acceltrain.planning import Plan, plan
from acceltrain.runtime import Runtime, connect
from acceltrain.version import __version__

backends.choose_before_keras()  # Keras imported after acceltrain, with no backend chosen, loads with jax

__all__ = ["connect", "Runtime", "Cluster", "Checkpoints", "plan", "Plan", "AcceltrainError", "UsageError", "TrainingDiverged", "__version__"]
