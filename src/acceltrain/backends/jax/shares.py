"""Each process's share of a fit's in-memory arrays kept on its own devices, in a job of several processes:
resident.py's placing and gathering there (issue 43 item 1).

A process of a job holds only its share of the arrays (inputs/arrays.py: every P-th sample) and Keras joins the
processes' local batches into the global batch (jax.make_array_from_process_local_data over the data layout: each
process's rows on its own devices, in the mesh's order). Here the share is placed once, a copy on each of the process's
devices, as one global array over the job's devices of shape (devices, share rows, ...), its first axis split over
every device of the mesh (`place`). Each step a process sends only its local batch's indices, cut over its devices as
Keras cuts the local batch (`laid_out`), and each device gathers its rows of the global batch from its own copy
(`batch_of`: shard_map, no collective), so the global batch is the one Keras's host path joins, row for row.
This holds where the data layout splits the batch over every device of the mesh (`splits_over_every_device`: a
data-parallel mesh); a mesh with a model axis, whose devices along it take the same rows, stays on Keras's input path.
"""

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec


def splits_over_every_device(distribution) -> bool:
    """Whether the distribution's data layout gives each device of its mesh its own rows of a batch."""
    mesh = distribution.device_mesh.backend_mesh
    layout = distribution.get_data_layout((mesh.size,)).backend_layout
    return len({index[0].start for index in layout.devices_indices_map((mesh.size,)).values()}) == mesh.size


def local_devices(distribution) -> list:
    """This process's devices of the distribution's mesh, in the mesh's order."""
    return [device for device in distribution.device_mesh.backend_mesh.devices.flat
            if device.process_index == jax.process_index()]


def place(distribution, inputs):
    """This process's `inputs` (a nest of arrays, None left as it is) as global arrays over the mesh: a copy on each
    of its devices, the first axis one slot a device. Every process's share has the same rows (the arrays' rules cut
    the samples to a multiple of the replicas before sharing them)."""
    sharding = _over_devices(distribution)
    here = local_devices(distribution)

    def one(array):
        array = np.asarray(array)
        copies = [jax.device_put(array[None], device) for device in here]
        return jax.make_array_from_single_device_arrays((sharding.mesh.size, *array.shape), sharding, copies)

    return jax.tree.map(one, inputs)


def laid_out(distribution, indices):
    """This process's batch indices (..., local batch) as a global array (..., devices, rows a device): each device's
    rows of the local batch in order, as Keras's join cuts a local batch over the process's devices."""
    indices = np.asarray(indices, dtype=np.int32)
    count = len(local_devices(distribution))
    shaped = indices.reshape(*indices.shape[:-1], count, indices.shape[-1] // count)
    return jax.make_array_from_process_local_data(_over_devices(distribution, indices.ndim - 1), shaped)


def batch_of(distribution, placed, indices):
    """The global batch gathered on the devices (traced): each device its own rows from its own copy of its process's
    share, (devices × rows a device, ...) split over every device as the data layout splits a batch."""
    mesh = distribution.device_mesh.backend_mesh
    spec = PartitionSpec(tuple(mesh.axis_names))

    def own_rows(copy, rows):
        return jax.tree.map(lambda array: array[0][rows[0]], copy)

    return jax.shard_map(own_rows, mesh=mesh, in_specs=(spec, spec), out_specs=spec)(placed, indices)


def joined(distribution, batch):
    """This process's rows of a batch read on the host (a nest of arrays, None left as it is) joined with the other
    processes' into the global batch, laid out as the distribution lays out a batch: what Keras's own iterator does
    to each local batch, for a batch handed to Keras's train function directly (which would take a NumPy array as
    the whole batch, each process its own)."""
    return jax.tree.map(lambda part: jax.make_array_from_process_local_data(
        distribution.get_data_layout(part.shape).backend_layout, part), batch)


def _over_devices(distribution, leading: int = 0) -> NamedSharding:
    mesh = distribution.device_mesh.backend_mesh
    return NamedSharding(mesh, PartitionSpec(*([None] * leading), tuple(mesh.axis_names)))
