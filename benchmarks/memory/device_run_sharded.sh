#!/usr/bin/env bash
# Run the sharded memory measurement (issue #49) on one GPU machine without network (the workplace's
# nvidia-h200): megatron-core travels as a wheel in .whl/ (see device_run.sh for the pip download line).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
export PYTHONUNBUFFERED=1 CUDA_DEVICE_MAX_CONNECTIONS=1
out="${OUT:-.}"
python3 benchmarks/memory/measure_sharded.py --all --out "$out/sharded.json" "$@" 2>&1 | tee "$out/sharded.log"
