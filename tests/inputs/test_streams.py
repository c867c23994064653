"""inputs/streams.py on its own: each process's share of a generator, a PyDataset or a Grain loader, read where it can be by
share (numpy; Keras and Grain where a test needs them)."""


import numpy as np
import pytest

from acceltrain import inputs
from acceltrain.inputs import arrays, streams
from acceltrain.errors import UsageError


def _split(num_replicas, num_processes=1, process_index=0, **more):
    return inputs.Split(num_replicas, num_processes, process_index, **more)


def _batches(n, batch):
    ids = np.arange(n)
    return [({"x": ids[i:i + batch, None] * 1.0}, ids[i:i + batch]) for i in range(0, n, batch)]


def _fed(batches):
    return sorted(int(i) for _, ids in batches for i in ids)


@pytest.mark.parametrize("n, batch, replicas, processes, fed", [
    (64, 16, 4, 2, 64),   # whole batches: every sample once, over the processes
    (70, 16, 4, 2, 68),   # a last batch of 6: 4 of them kept, as arrays' final batch is trimmed
    (66, 16, 4, 1, 64),   # one process, a last batch of 2 (fewer than the replicas): left out
    (66, 16, 1, 1, 66),   # one replica: as it is
])
def test_a_generator_is_shared_batch_by_batch_so_each_sample_is_fed_once(n, batch, replicas, processes, fed):
    """The arrays' rules batch by batch: each process feeds its rows of every batch (every P-th), each batch cut to
    a multiple of the replicas; the processes' shares together are each kept sample once."""
    shares = [list(streams.share_stream(_split(replicas, processes, p), iter(_batches(n, batch)), []))
              for p in range(processes)]
    every = sorted(sum((_fed(share) for share in shares), []))
    assert every == list(range(fed)) if replicas > 1 else every == list(range(n))
    for batches in zip(*shares):  # global batch k: the script's batch k, its rows split evenly
        rows = sum(len(ids) for _, ids in batches)
        assert rows % replicas == 0 and len({len(ids) for _, ids in batches}) == 1


def _py_dataset(n, batch, reads):
    import keras

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return -(-n // batch)

        def __getitem__(self, i):
            reads.append(i)
            return _batches(n, batch)[i]

    return Batches()


@pytest.mark.parametrize("n, read_by_both", [
    (72, [4]),     # batches 16, 16, 16, 16, 8: groups (0, 1), (2, 3) and the pass's last, (4,)
    (64, [2, 3]),  # four batches: the last group (2, 3) holds the pass's last batch
])
def test_a_py_dataset_is_read_by_share_each_process_whole_batches_of_its_own(n, read_by_both):
    """2 processes, 4 replicas, batches of 16: process p reads batch 2g + p of each group once and feeds half of it at
    each of the group's two steps; the group holding the pass's last batch is read by both. Every sample is fed once,
    and at each step both processes feed as many rows (the global batch: 16, each a multiple of the replicas)."""
    reads, shares, notes = [[], []], [], []
    for process in (0, 1):
        x = _py_dataset(n, 16, reads[process])
        assert streams.stream_batch_size(x, process, 2) == 16  # its first read, kept for the share's
        shared = streams.share_stream(_split(4, 2, process), x, notes)
        shares.append([shared[i] for i in range(len(shared))])
        assert len(shared) == len(x)
    assert sorted(reads[0] + reads[1]) == sorted(list(range(-(-n // 16))) + read_by_both)
    assert set(reads[0]) & set(reads[1]) == set(read_by_both)
    assert sorted(_fed(shares[0]) + _fed(shares[1])) == list(range(n))
    for batches in zip(*shares):
        assert len({len(ids) for _, ids in batches}) == 1 and sum(len(ids) for _, ids in batches) % 4 == 0
    first_step = sorted(int(i) for _, ids in (shares[0][0], shares[1][0]) for i in ids)
    assert first_step == list(range(0, 16, 2)) + list(range(16, 32, 2))  # rows 0, 2, ... of batches 0 and 1
    assert "process p reads whole batches p, p + 2, ..." in dict(notes)["share:x:a keras.utils.PyDataset"]


def test_a_py_dataset_in_one_process_is_cut_and_its_probed_batch_is_not_read_again():
    reads = []
    x = _py_dataset(70, 16, reads)
    streams.stream_batch_size(x)
    shared = streams.share_stream(_split(4), x, [])
    assert [len(shared[i][1]) for i in range(len(shared))] == [16, 16, 16, 16, 4] and reads == [0, 1, 2, 3, 4]


def test_a_generator_is_read_whole_by_every_process_said_with_the_way_to_read_it_once():
    notes = []
    streams.share_stream(_split(4, 2), iter(_batches(64, 16)), notes)
    assert "every process reads every batch whole" in notes[0][1] and "pass a keras.utils.PyDataset" in notes[0][1]


def test_a_stream_nobody_can_share_is_refused_with_the_fix():
    with pytest.raises(UsageError, match="Received x of type range on 4 replicas.*Pass numpy arrays, a tf.data"):
        streams.share_stream(_split(4, 2), range(3), [])


def test_a_stream_is_read_whole_for_evaluate_and_predict():
    notes = []
    x, y, weights = streams.stream_to_arrays(iter(_batches(10, 4)), notes=notes)
    assert x["x"].shape == (10, 1) and list(y) == list(range(10)) and weights is None
    assert "read into memory (10 samples)" in notes[0][1]
    prepared = inputs.prepare_predict(_split(4, 2), iter([np.ones((3, 2)), np.ones((2, 2))]))
    assert prepared.num_samples == 5 and "in_memory:x" in dict(prepared.notes)


def _grain_loader(shards):
    grain = pytest.importorskip("grain.python")
    records = np.arange(21, dtype="float32")
    sampler = grain.IndexSampler(num_records=21, shard_options=shards, shuffle=False, num_epochs=1)
    return grain.DataLoader(data_source=records, sampler=sampler, shard_options=shards, worker_count=0,
                            operations=[grain.Batch(8, drop_remainder=False)])


def test_a_grain_loader_is_rebuilt_with_grain_s_shard_options_reading_only_this_processs_records():
    """21 records, batches of 8, 2 processes of 2 replicas each: process 1 reads records 10-19 only (Grain's shard 1
    of 2, its remainder dropped so both take as many steps), in batches of 4, the last cut to the local replicas; the
    loader stays re-iterable (each iter() a new pass)."""
    grain = pytest.importorskip("grain.python")
    read = []

    class Records:
        def __len__(self):
            return 21

        def __getitem__(self, i):
            read.append(int(i))
            return np.float32(i)

    sampler = grain.IndexSampler(num_records=21, shard_options=grain.NoSharding(), shuffle=False, num_epochs=1)
    loader = grain.DataLoader(data_source=Records(), sampler=sampler, worker_count=0,
                              operations=[grain.Batch(8, drop_remainder=False)])
    notes = []
    shared = streams.share_stream(_split(4, 2, 1), loader, notes)
    for _ in range(2):
        read.clear()
        assert [batch.tolist() for batch in shared] == [[10, 11, 12, 13], [14, 15, 16, 17], [18, 19]]
        assert sorted(read) == list(range(10, 20))
    assert "rebuilt with Grain's ShardOptions (process p reads shard p of 2" in dict(notes)["share:x:a Grain loader"]
    other = grain.DataLoader(data_source=Records(), sampler=sampler, worker_count=0,
                             operations=[grain.Batch(7, drop_remainder=False)])  # 7 rows: no half for each
    streams.share_stream(_split(2, 2, 1), other, notes)
    assert any("every process reads every batch whole" in message for _, message in notes)


def test_a_grain_loader_sharded_by_process_is_only_cut_and_one_sharded_otherwise_is_refused():
    grain = pytest.importorskip("grain.python")
    mine = grain.ShardOptions(shard_index=1, shard_count=2, drop_remainder=True)  # records 10-19 (ShardByJaxProcess's)
    shared = streams.share_stream(_split(4, 2, 1), _grain_loader(mine), [])
    assert [batch.tolist() for batch in shared] == [[10, 11, 12, 13, 14, 15, 16, 17], [18, 19]]
    with pytest.raises(UsageError, match="a Grain loader sharded 3 ways, in a job of 2 process.*ShardByJaxProcess"):
        streams.share_stream(_split(4, 2), _grain_loader(grain.ShardOptions(0, 3)), [])


def _joined(shares):
    """What join_shares gives every process: the processes' rows together, in the order of their places."""

    order = np.argsort(np.concatenate([keys for _, keys in shares]), kind="stable")

    def join(parts):
        if parts[0] is None:
            return None
        if isinstance(parts[0], dict):
            return {key: join([part[key] for part in parts]) for key in parts[0]}
        return np.concatenate(parts)[order]

    return tuple(join(list(parts)) for parts in zip(*(arrays.batches_to_arrays(batches) for batches, _ in shares)))


@pytest.mark.parametrize("kind", ["pydataset", "grain"])
def test_for_evaluate_and_predict_each_process_reads_its_share_and_the_shares_join_into_the_stream_in_order(kind):
    """Issue 45: 70 samples in batches of 16 (a PyDataset: process 0 reads batches 0, 2, 4, process 1 batches 1, 3)
    or 20 records of a Grain loader in batches of 8 (every 2nd record each): no sample read twice, and the shares,
    put back by their places, are the stream read whole, in its order."""
    if kind == "pydataset":
        reads = []
        stream, whole = _py_dataset(70, 16, reads), list(range(70))
    else:
        grain = pytest.importorskip("grain.python")
        stream = grain.DataLoader(data_source=np.arange(20, dtype="int64"), worker_count=0,
                                  sampler=grain.IndexSampler(num_records=20, shard_options=grain.NoSharding(),
                                                             shuffle=False, num_epochs=1),
                                  operations=[grain.Batch(8, drop_remainder=False)])
        whole = list(range(20))
    shares = []
    for process in (0, 1):
        if kind == "pydataset":
            reads.clear()
        shared, how = streams._share_rows(stream, None, process, 2)
        assert shared is not None, how
        shares.append(shared)
        if kind == "pydataset":
            assert reads == list(range(process, 5, 2)), reads  # its own batches, each once
    ids = _joined(shares)[1] if kind == "pydataset" else _joined(shares)[0]
    assert ids.tolist() == whole
    if kind == "grain":  # every 2nd record each: none read by both
        assert [int(i) for batches, _ in shares[:1] for b in batches for i in np.ravel(b)] == whole[0::2]
