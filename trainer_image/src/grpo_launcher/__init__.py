"""grpo_launcher: the Ray job entrypoint of the trainer image.

It reads the run config the operator rendered (``/etc/grpo/run-config.json``), prints and serves the
image's provenance, runs the preflight (libcuda, GPUs, /dev/shm, EFA, GDRCopy, checkpoint space, an NCCL
all-reduce) and then starts miles with exactly the argv the operator rendered. It also carries the offline
AIME-style evaluation (``python -m grpo_launcher evaluate``) and the argv builders of the prepare steps.
It never imports the operator's code: the run config is its only contract with it.
"""

from __future__ import annotations

__version__ = "0.1.0"
