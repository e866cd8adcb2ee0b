"""The launcher's Prometheus endpoint: the provenance info metric, served while miles runs.

The launcher stays alive as miles's parent (an exec would end this server), so the metric is scrapeable for
the whole run at ``http://<pod>:<metricsPort>/metrics`` as ``grpo_trainer_provenance_info{...} 1``. A port
already in use is a warning, not a reason to stop the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Info, start_http_server


@dataclass
class MetricsServer:
    port: int
    server: Any

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def provenance_registry(facts: Mapping[str, str]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    info = Info("grpo_trainer_provenance", "What the trainer image holds, read at start", registry=registry)
    info.info(dict(facts))
    return registry


def serve(facts: Mapping[str, str], port: int, addr: str) -> MetricsServer:
    """Serve the info metric on ``addr:port`` (port 0 picks a free one); raises OSError if it cannot bind."""
    server, _thread = start_http_server(port, addr=addr, registry=provenance_registry(facts))
    return MetricsServer(port=int(server.server_port), server=server)
