# syntax=docker/dockerfile:1
# A dev layer for the real-node tests, never a product image: the ray-node layer with the GPU played, so the worker
# pods' preflight passes on a node without one. A stand-in libcuda.so.1 (cuInit and cuDriverGetVersion), a stand-in
# `torch` (what the preflight's GPU probe and all-reduce call) and a stand-in nvidia-smi (the provenance query),
# all in devtools/images/gpu_standin/ and all answering for GRPO_STANDIN_GPUS GPUs (the real-node runtime's pod env):
# none when it is unset. The ray-node layer without them is the "plain" image whose preflight fails.
# Built by devtools/grpo_dev/images (DEV_IMAGES) on top of the ray-node layer it has just built.
ARG RAY_NODE_IMAGE=localhost/grpo-ray-node:dev
FROM ${RAY_NODE_IMAGE} AS libcuda
USER root
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY devtools/images/gpu_standin/libcuda.c /src/libcuda.c
RUN gcc -shared -fPIC -O2 -o /src/libcuda.so.1 /src/libcuda.c

FROM ${RAY_NODE_IMAGE}
USER root
COPY --from=libcuda /src/libcuda.so.1 /usr/local/lib/libcuda.so.1
COPY devtools/images/gpu_standin/nvidia-smi /usr/local/bin/nvidia-smi
COPY devtools/images/gpu_standin/torch /src/torch
RUN ldconfig \
    && mv /src/torch "$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch" \
    && rmdir /src \
    && chmod 0755 /usr/local/bin/nvidia-smi \
    && GRPO_STANDIN_GPUS=1 /opt/venv/bin/python -c "import torch, ctypes; assert torch.cuda.device_count() == 1; assert ctypes.CDLL('libcuda.so.1').cuInit(0) == 0"
USER 10001:10001
