#!/usr/bin/env bash
# Run the actor memory calibration on a GPU machine without network (the workplace's nvidia-h200):
# megatron-core travels as a wheel in .whl/ (torch, numpy and packaging are the machine's own).
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 -d .whl megatron-core==0.19.2
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
export PYTHONUNBUFFERED=1 CUDA_DEVICE_MAX_CONNECTIONS=1
out="${OUT:-.}"
python3 benchmarks/memory/measure_actor.py --all --out "$out/measurements.json" "$@"
