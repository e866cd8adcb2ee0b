"""What this pod's CUDA stack sees, measured in a child process and printed as one JSON object.

Run as ``python -m grpo_launcher.gpu_probe``. It is a separate process so that the launcher, which stays
alive as miles's parent, never holds a CUDA context (one per GPU would cost memory SGLang counts on).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from grpo_launcher.allreduce import nccl_version_string


def probe() -> dict[str, Any]:
    import torch  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415

    devices = []
    for index in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(index)
        devices.append({"index": index, "name": torch.cuda.get_device_name(index), "free": free, "total": total})
    nccl = nccl_version_string(torch.cuda.nccl.version()) if devices else ""
    return {
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "torch": str(torch.__version__),
        "cuda": str(torch.version.cuda),
        "nccl": nccl,
        "devices": devices,
    }


def main() -> int:
    try:
        result = probe()
    except Exception as exc:  # reported to the parent, which turns it into a check result
        result = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
