#!/usr/bin/env bash
# Runs the launcher's preflight for real on a GPU machine (the workplace's device machine), from the repo root:
#   bash trainer_image/scripts/device_preflight.sh <gpus> <bus-bandwidth-floor-GBps>
# Needs: python3 with torch (the machine's own), the .whl folder with pydantic's cp312 wheels when pydantic is
# missing there, and $OUT for the logs. Prints the bandwidth table, the preflight's time and verdict, then a
# negative case (one GPU more than present must fail with exit 3) and a full `run` of a trivial argv.
set -euo pipefail
gpus=$1
floor=$2
out=${OUT:-/tmp/grpo-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if ! python3 -c 'import pydantic' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/trainer_image/src${PYTHONPATH:+:$PYTHONPATH}"
work=$(mktemp -d)
diag() {  # a diagnostic that may fail without stopping the script; says so when it does
  if ! "$@"; then echo "(diagnostic failed: $1)"; fi
}
write_config() {  # $1 file, $2 gpus, $3 floor
  python3 - "$1" "$2" "$3" "$work/ckpt" <<'PY'
import json, sys
path, gpus, floor, ckpt = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
code = ("import sys, urllib.request as u; body = u.urlopen('http://127.0.0.1:9465/metrics').read().decode(); "
        "print('scraped:', [l for l in body.splitlines() if l.startswith('grpo_trainer_provenance_info')][0][:400]); "
        "print('miles stand-in argv:', sys.argv[1:]); sys.exit(7)")
argv = ["python3", "-c", code, "a b", "--x=$HOME"]
cfg = {"apiVersion": "grpo.dev/v1alpha1", "kind": "RunConfig",
       "run": {"name": "device-check", "namespace": "default", "uid": "0"},
       "spec": {}, "plan": {"gpusPerNode": gpus},
       "preflight": {"gpus": gpus, "minFreeGpuMemoryGiB": 98.0, "shmMinGiB": 1, "fabric": {"type": "efa", "devices": 0},
                     "gdrcopy": False, "checkpointDir": ckpt, "checkpointGiB": 1.0,
                     "minBusBandwidthGBps": floor, "metricsPort": 9465},
       "argv": argv, "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}}
open(path, "w").write(json.dumps(cfg))
PY
}
{
  echo "== machine"
  diag nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  diag nvidia-smi topo -m
  diag python3 -c 'import os; print({k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")})'
  diag python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
  write_config "$work/ok.json" "$gpus" "$floor"
  echo "== preflight (expected to pass): python3 -m grpo_launcher preflight --config ok.json"
  start=$(date +%s.%N)
  set +e; python3 -m grpo_launcher preflight --config "$work/ok.json"; rc=$?; set -e
  end=$(date +%s.%N)
  echo "preflight exit code $rc, wall time $(python3 -c "print(round($end - $start, 2))") s"
  write_config "$work/bad.json" "$((gpus + 1))" 0
  echo "== preflight with one GPU more than present (expected exit 3)"
  set +e; python3 -m grpo_launcher preflight --config "$work/bad.json" | tail -n 1; bad=${PIPESTATUS[0]}; set -e
  echo "negative preflight exit code $bad"
  if [ "$gpus" -ge 2 ]; then
    write_config "$work/floor.json" "$gpus" 2000
    echo "== preflight with a bus-bandwidth floor of 2000 GB/s (expected exit 3)"
    set +e; python3 -m grpo_launcher preflight --config "$work/floor.json" | tail -n 1; floorrc=${PIPESTATUS[0]}; set -e
    echo "floor preflight exit code $floorrc"
  fi
  echo "== run: provenance, metrics, preflight, then the stand-in argv (expected exit 7)"
  mapfile -t argv < <(python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["argv"]))' "$work/ok.json")
  set +e; python3 -m grpo_launcher run --metrics-addr 127.0.0.1 --config "$work/ok.json" -- "${argv[@]}"; runrc=$?; set -e
  echo "run exit code $runrc"
} 2>&1 | tee "$out/log"
