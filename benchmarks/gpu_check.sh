#!/usr/bin/env bash
# The section "epoch-speed-gpu": benchmarks/epoch_speed.py (`acceltrain bench`) on the NVIDIA H200 the device
# tool lends: plain Keras (JAX, steps_per_execution=1, since that machine has no TensorFlow), acceltrain, the
# hand-written loop and the bf16 matmul ceiling. About 3-5 minutes; stops itself at 7 (issue #5 asks for
# under 8). Its record comes back as $OUT/epoch-speed-gpu.json: commit it as
# benchmarks/results/epoch-speed-gpu.json, then `python benchmarks/render.py`.
#
# NOT YET RUN: this task was lent no device. Written for the machine as /work/.library/device/ describes
# it (Python 3.12, JAX 0.11 with CUDA 13, no TensorFlow, no Keras, no network).
#
# 1. Here, once, in the repo's root (PyPI is reachable here, not there): the three packages Keras needs
#    that the machine lacks (its absl-py, numpy, rich, h5py, ml-dtypes and packaging are there).
#      echo /.whl/ >> .git/info/exclude
#      python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#        --platform manylinux2014_x86_64 -d .whl keras==3.15.1 namex==0.1.0 optree==0.20.0
# 2. The device tool sends the checkout the session started in (the merged tree), src/ included:
#      run(command="bash benchmarks/gpu_check.sh", carry=[".whl"], timeout_s=480)
# 3. What comes back under $OUT: epoch-speed-gpu.json (the record), bench-gpu.txt (the run's output), env.txt,
#    default-job-metrics.json (`acceltrain train`'s, with its ledger; not yet run on a GPU either).
set -uo pipefail
OUT=${OUT:-/tmp/acceltrain-gpu-check}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "gpu_check: the wheels in .whl did not install: see step 1 above" >&2; exit 1; }
export PYTHONPATH="/tmp/site:$PWD/src" PYTHONUNBUFFERED=1 KERAS_BACKEND=jax
export XDG_CACHE_HOME=/tmp/acceltrain-cache  # a bare machine: start cold, as a user's first run does

{
  nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import sys, jax, keras; print(sys.version.split()[0], 'jax', jax.__version__, 'keras', keras.__version__, jax.devices())"
  python3 -m acceltrain devices
} 2>&1 | tee "$OUT/env.txt"

# 10 epochs of 50 steps: on the GPU an epoch is milliseconds, so more of them steady the median.
timeout 420 python3 benchmarks/epoch_speed.py --section epoch-speed-gpu --epochs 10 --repeats 2 --results "$OUT" 2>&1 \
  | tee "$OUT/bench-gpu.txt"
status=${PIPESTATUS[0]}
[ "$status" -eq 124 ] && echo "gpu_check: bench ran past 7 minutes and was stopped" >&2
# The default job's ledger on the GPU (metrics.json's "ledger": where its time went, with the MFU of its steps,
# the H200's peak being published): best effort, it does not change the exit status. The bench record above
# holds the ledger of each of acceltrain's runs too.
timeout 120 python3 -m acceltrain train --epochs 3 --out /tmp/acceltrain-default-job 2>&1 | tail -3 \
  && cp /tmp/acceltrain-default-job/metrics.json "$OUT/default-job-metrics.json"
exit "$status"
