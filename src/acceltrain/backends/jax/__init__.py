"""Distribution on JAX: `keras.distribution` over the devices JAX sees, and jax.distributed.

The same function names as `backends/tensorflow.py` (backends.INTERFACE), gathered here from one module per
concern; only this package imports jax:

- devices.py       start-up (simulated CPU devices, libtpu skipped where no TPU is) and what is there
- compiles.py      the persistent compilation cache, and the time ledger's view of compiling (events, FLOPs)
- distribution.py  the Keras distribution a runtime makes (data, fsdp, model: born sharded), found again by mesh
- layouts.py       where each variable lives: its layout under a distribution, moved one at a time, measured
- steps.py         one step at a time on several CPU devices; steps acceltrain runs itself (timed, --verify)
- op_by_op.py      the placement layer of Keras's fit/evaluate/predict, and a step Keras would run op by op
- processes.py     a job of several processes: jax.distributed, each process's share, predictions gathered
"""

from acceltrain.backends.jax.compiles import enable_compilation_cache, shapes_of, step_flops, watch_compiles
from acceltrain.backends.jax.devices import (compute_capability, device_counts, device_kind, device_memory, devices,
                                             prepare, process_count, process_index, set_seed, versions)
from acceltrain.backends.jax.distribution import (candidate_distribution, distribution_name, distribution_of,
                                                  indivisible_weights, is_layout_map, make_distribution,
                                                  make_sharded_distribution, mesh_words, num_replicas,
                                                  own_distribution, release, scope, sharding_parts, weighed)
from acceltrain.backends.jax.layouts import abstract_state, first_device_bytes, layouts_of, relayout, variable_layouts
from acceltrain.backends.jax.op_by_op import (follow_placement, on_one_device, op_by_op_in_processes,
                                              op_by_op_made_safe)
from acceltrain.backends.jax.processes import (HEARTBEAT_TIMEOUT_SECONDS, devices_spanned, gathering_predictions,
                                               join_shares, shard_inputs_per_process, split_over_processes,
                                               start_processes)
from acceltrain.backends.jax.steps import step_callbacks, steps_on_one_device, steps_one_at_a_time, verify_steps

NAME = "jax"

# A batch must divide over the devices of the mesh: JAX cannot shard the last, partial batch of a
# dataset unevenly, so an evaluation dataset is read into memory and repeated whole instead
# (inputs._eval_dataset).
SPLITS_UNEVEN_BATCHES = False

# The one capability flag (backends.SHARDING): Keras's distribution API lays out each variable here, so weights can
# be cut over devices (fsdp, model), moved to another layout, and measured from shapes; placement, the autopilot and
# --verify ask this and nothing else.
SHARDS = True

# What this package has beyond backends.INTERFACE: the compilation cache, and backends.SHARDING (what SHARDS gives).
OWN = ("enable_compilation_cache", "on_one_device", "op_by_op_in_processes",
       # saving in a job of several processes (acceltrain run): only JAX runs one
       "split_over_processes")

