"""deploy/argocd/grporun-health.lua run the way Argo CD runs it: Lua 5.1 (Argo CD embeds gopher-lua, a
Lua 5.1 implementation), the resource as the global `obj`, the returned table as the health."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lupa import lua51

ARGOCD = Path(__file__).resolve().parents[2] / "deploy" / "argocd"
HEALTH_LUA = ARGOCD / "grporun-health.lua"


def health(obj: dict[str, Any], script: str | None = None) -> dict[str, str]:
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    runtime.globals().obj = runtime.table_from(obj, recursive=True)
    result = runtime.execute(script if script is not None else HEALTH_LUA.read_text())
    return {key: str(value) for key, value in result.items()}
