"""A tf.data dataset (map, batch, prefetch autotuned) distributed by MirroredStrategy over 8 logical CPUs, read whole,
its iterator kept LIVED seconds, then dropped, as Keras drops an epoch's iterator. `plain`: TensorFlow alone, no
acceltrain; `acceltrain`: the strategy acceltrain's TensorFlow backend makes (backends/tensorflow.py), then released.
Prints one JSON line: whether each replica's dataset is autotuned (None: TensorFlow's default, on), the source's own
setting, what each replica read, and how long the drop took.
    python distributed_dataset_dropped.py plain|acceltrain [LIVED]  (tests/backends/test_tensorflow.py)"""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

way, lived = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
if way == "plain":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 8)
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(8)])
else:
    from acceltrain.backends import tensorflow as backend

    backend.prepare(8)
    strategy = backend.make_distribution("data", backend.devices("cpu"))

dataset = tf.data.Dataset.range(320).map(lambda i: tf.cast(i, tf.float32) * 2.0).batch(32).prefetch(tf.data.AUTOTUNE)
iterator = iter(strategy.experimental_distribute_dataset(dataset))
replicas = iterator._iterators[0]._iterator._device_iterators  # TensorFlow's own: one iterator a replica
read = [[float(tf.reduce_sum(part)) for part in strategy.experimental_local_results(batch)] for batch in iterator]
found = {"replicas_autotuned": [each._dataset.options().autotune.enabled for each in replicas],
         "source_autotuned": dataset.options().autotune.enabled, "read": read}
time.sleep(lived)
start = time.perf_counter()
del iterator, replicas
found["drop_seconds"] = round(time.perf_counter() - start, 3)
if way == "acceltrain":
    from tensorflow.python.data.ops import multi_device_iterator_ops

    backend.release(strategy)
    found["tensorflows_own_again"] = not hasattr(multi_device_iterator_ops._create_device_dataset, "tensorflows")
print(json.dumps(found))
