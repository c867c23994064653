#!/usr/bin/env bash
# Everything acceltrain measures on a GPU, in one run of about 9 minutes (the bench at three batch sizes the longest part) (each part stopped at its limit: 10 at most) on the NVIDIA H200 the device tool lends
# (issue #37), each part with its own time limit so that one part's failure leaves the others' records:
#   1. env.txt: the GPU, the versions, `acceltrain devices` and `acceltrain doctor`;
#   2. a keras_hub causal LM fine-tune, LoRA, bf16 (benchmarks/lm_finetune.py: Gemma 2B's shapes, 6 layers, under
#      `acceltrain run --verify 3 --ledger`, then `acceltrain plan --target here` for the same job): throughput, MFU,
#      peak memory beside the plan's: lm-finetune-gpu.json;
#   3. the default job's bench at batch 32, 128 and 1,200 (benchmarks/epoch_speed.py, `acceltrain bench`: plain
#      Keras on JAX, since that machine has no TensorFlow, in acceltrain's precision; acceltrain; the hand-written
#      scanned epoch; the bf16 matmul ceiling; MFU against the published peak): epoch-speed-gpu.json;
#   4. the README's main job (`acceltrain train`, 3 epochs): default-job-metrics.json, with its ledger.
# The output of every part goes to log.txt. Commit epoch-speed-gpu.json and lm-finetune-gpu.json as
# benchmarks/results/, default-job-metrics.json as benchmarks/results/gpu/, then `python benchmarks/render.py`.
#
# Written for the machine as /work/.library/device/ describes it (Python 3.12, JAX 0.11 with CUDA 13, no TensorFlow,
# no Keras, no network). Here, once, in the repo's root (PyPI is reachable here, not there), the packages acceltrain
# needs that the machine lacks (its absl-py, numpy, rich, h5py, ml-dtypes, packaging, regex, orbax-checkpoint,
# matplotlib and pyyaml are there):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl keras==3.15.1 optree==0.20.0 keras-hub==0.32.0 \
#     namex==0.1.0 grain==0.2.18 array-record==0.8.6 portpicker==1.6.0
# (keras_hub's fit needs Grain or TensorFlow to batch arrays; Grain needs array-record and portpicker), then commit
# and: run(command="ACCELTRAIN_TREE_COMMIT=<git rev-parse --short HEAD> bash benchmarks/gpu_check.sh",
# carry=[".whl"], timeout_s=500). The copy there may hold a stale .git: the records name the commit passed.
# GPU_CHECK_QUICK=1 rehearses the whole script on a CPU in minutes (tiny sizes; its records are not results).
set -uo pipefail
OUT=${OUT:-/tmp/acceltrain-gpu-check}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu_check: the wheels in .whl did not install: see the top of this file" >&2; exit 1; }
  export PYTHONPATH="/tmp/site:$PWD/src"
else
  export PYTHONPATH="$PWD/src"
fi
export PYTHONUNBUFFERED=1 KERAS_BACKEND=jax
export XDG_CACHE_HOME=/tmp/acceltrain-cache  # a bare machine: start cold, as a user's first run does
LOG="$OUT/log.txt"
if [ "${GPU_CHECK_QUICK:-0}" = 1 ]; then
  QUICK=(--quick); TRAIN=(--epochs 1)
else
  QUICK=(); TRAIN=(--epochs 3)
fi
part() { echo "=== $* ($(date -u +%T))" | tee -a "$LOG"; }
failed=0
note() { local status=$1; shift; [ "$status" -eq 0 ] || { echo "gpu_check: $* exited $status" | tee -a "$LOG" >&2; failed=1; }; }

part env
{
  nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv
  python3 -c "import sys, jax, keras, keras_hub; print('python', sys.version.split()[0], 'jax', jax.__version__, 'keras', keras.__version__, 'keras_hub', keras_hub.__version__, jax.devices())"
  timeout 60 python3 -m acceltrain devices
  timeout 90 python3 -m acceltrain doctor --out /tmp/acceltrain-doctor
} 2>&1 | tee "$OUT/env.txt" >> "$LOG"

part "LoRA fine-tune under acceltrain run, and plan --target here"
timeout 260 python3 benchmarks/lm_finetune.py "${QUICK[@]}" --results "$OUT" >> "$LOG" 2>&1
note $? "benchmarks/lm_finetune.py"

part "bench (the default job)"
timeout 300 python3 benchmarks/epoch_speed.py --section epoch-speed-gpu --epochs 6 --repeats 2 "${QUICK[@]}" --results "$OUT" \
  >> "$LOG" 2>&1
note $? "benchmarks/epoch_speed.py"

part "acceltrain train (the README's main job)"
JOB=$(mktemp -d)/default-job
timeout 60 python3 -m acceltrain train "${TRAIN[@]}" --out "$JOB" >> "$LOG" 2>&1
status=$?
note $status "acceltrain train"
[ "$status" -eq 0 ] && cp "$JOB/metrics.json" "$OUT/default-job-metrics.json"
part end
tail -40 "$LOG"
exit "$failed"
