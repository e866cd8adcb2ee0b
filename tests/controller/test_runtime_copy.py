"""The reconciler and the runtime copy in status.runtime, with a fake API server (tests/support/fakekube.py): the
copy is used only while the operator's seal on it verifies; one rewritten through the status subresource is not,
and the run is checked against the live GRPORuntime instead (held, with a RuntimeAltered condition and event, while
none exists); an edit of a started run keeps the live runtime's locks as well as the copy's. One status write per
reconcile at most."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
import yaml
from grpo_operator.api.status import Reason
from grpo_operator.controller.config import OperatorSettings
from grpo_operator.controller.reconciler import Outcome, Reconciler
from grpo_operator.edges.kube import Kube

from tests.support.builders import EXAMPLES
from tests.support.fakekube import FakeKube

NS, RUN, RT = "team-a", "quickstart-ib", "h100-ib"
GUARDS = {"consecutiveRollouts": 3}
EDIT = {"guards": {"consecutiveRollouts": 5}}  # an edit a started run may make (spec.guards is mutable)


def runtime_doc(*locked: str) -> dict[str, Any]:
    """The InfiniBand example without its Kueue queue, locking `locked` (guards with a default of its own)."""
    doc = yaml.safe_load((EXAMPLES / "runtimes" / "h100-infiniband.yaml").read_text())
    doc["spec"]["defaults"]["scheduling"].pop("queueName")
    doc["spec"]["locks"]["fields"] = list(locked)
    if "guards" in locked:
        doc["spec"]["defaults"]["guards"] = GUARDS
    return cast(dict[str, Any], doc)


def permissive(record: dict[str, Any]) -> dict[str, Any]:
    """The recorded copy with every lock taken off: what someone allowed to patch grporuns/status would write."""
    out = copy.deepcopy(record)
    out["spec"]["locks"] = {"fields": [], "imagePrefixes": [], "maxNodesPerRun": None}  # a merge patch: null removes
    return out


class World:
    """One run (`name`) on the fake API server, reconciled by a real Reconciler with a clock that moves 15 s a
    reconcile; `kube` shares the API server (and the operator's key) with another World."""

    def __init__(self, runtime: dict[str, Any] | None, kube: FakeKube | None = None, name: str = RUN) -> None:
        self.kube = kube or FakeKube()
        self.name = name
        if runtime is not None:
            self.kube.put_runtime(runtime)
        doc = yaml.safe_load((EXAMPLES / "runtimes" / "quickstart.yaml").read_text())
        doc["metadata"] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1}
        if runtime is not None:
            doc["spec"]["runtimeRef"] = {"name": runtime["metadata"]["name"]}
        self.kube.put_run(doc)
        self.now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
        self.reconciler = Reconciler(
            kube=cast(Kube, self.kube),
            settings=OperatorSettings(ray_address="http://127.0.0.1:9"),
            clock=self._tick,
            ray_for=_no_ray,
        )

    def _tick(self) -> datetime:
        self.now += timedelta(seconds=15)
        return self.now

    def reconcile(self) -> Outcome:
        self.kube.calls.clear()
        outcome = self.reconciler.reconcile({"metadata": {"namespace": NS, "name": self.name}})
        assert self.kube.calls.count(f"patch status {self.name}") <= 1, self.kube.calls  # one status write at most
        return outcome

    @property
    def status(self) -> dict[str, Any]:
        return self.kube.status_of(NS, self.name)

    def edit(self, patch: dict[str, Any] = EDIT) -> None:
        self.kube.edit_spec(NS, self.name, patch)

    def tamper(self, **status: Any) -> None:
        self.kube.edit_status(NS, self.name, status)


def _no_ray(address: str, token: str | None) -> Any:
    class NoRay:  # no RayCluster exists here, so no reconcile may reach the Jobs API
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"the Ray Jobs API was called ({name}) with no RayCluster")

    return NoRay()


def validated(status: dict[str, Any]) -> tuple[str, str]:
    found = next(c for c in status["conditions"] if c["type"] == "Validated")
    return found["status"], found["reason"]


def planned(world: World) -> dict[str, Any]:
    """The first reconcile: the run is planned, its runtime recorded and sealed, its children applied."""
    world.reconcile()
    status = world.status
    assert status["runtime"]["name"] == world.kube.runs[(NS, world.name)]["spec"]["runtimeRef"]["name"]
    assert status["runtimeDigest"].startswith("hmac-sha256:")
    assert validated(status) == ("True", Reason.VALID)
    return status


# --- (a) a copy rewritten through the status subresource -------------------------------------------------------


Tamper = Callable[[dict[str, Any]], dict[str, Any]]
TAMPERS: list[tuple[str, Tamper]] = [
    ("the copy made permissive, the digest left", lambda s: {"runtime": permissive(s["runtime"])}),
    ("the copy made permissive, the digest removed", lambda s: {"runtime": permissive(s["runtime"]), "runtimeDigest": None}),
    ("the copy made permissive, a digest forged", lambda s: {"runtime": permissive(s["runtime"]), "runtimeDigest": "hmac-sha256:" + "0" * 64}),
    ("observedGeneration moved on so the edit looks judged", lambda s: {"observedGeneration": 2}),
]  # fmt: skip


@pytest.mark.parametrize(("case", "tamper"), TAMPERS, ids=[c for c, _ in TAMPERS])
def test_a_rewritten_copy_is_not_used_and_an_edit_to_a_locked_value_is_refused_naming_the_lock(
    case: str, tamper: Tamper
) -> None:
    world = World(runtime_doc("guards"))
    before = planned(world)
    world.tamper(**tamper(before))
    world.edit()
    outcome = world.reconcile()
    status = world.status
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec"), case
    assert "spec.guards" in status["message"] and "locks.fields lists guards" in status["message"], case
    assert f"GRPORuntime {RT}" in status["message"]
    [(reason, message)] = outcome.alerts
    assert reason == Reason.RUNTIME_ALTERED and "status.runtime" in message and "not used" in message, case
    assert f"checked against GRPORuntime {RT}" in message
    # The rewritten copy is dropped, never sealed: the refused run records no runtime, as a run refused at its first
    # reconcile does.
    assert "runtime" not in status and "runtimeDigest" not in status


def test_a_rewritten_copys_image_and_env_never_reach_the_pods() -> None:
    """No edit at all: the copy alone decides what the RayCluster runs, so a rewritten one must not be rendered."""
    world = World(runtime_doc())
    before = planned(world)
    image = before["runtime"]["spec"]["defaults"]["trainerImage"]
    rewritten = permissive(before["runtime"])
    rewritten["spec"]["defaults"]["trainerImage"] = "docker.io/mallory/trainer:1"
    rewritten["spec"]["defaults"]["env"] = {"LD_PRELOAD": "/shared/mallory.so"}
    world.tamper(runtime=rewritten)
    outcome = world.reconcile()
    cluster = world.kube.applied[("RayCluster", f"{RUN}-ray")]
    for group in (cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]):
        [container] = [c for c in group["template"]["spec"]["containers"] if c["name"] != "preflight"][:1]
        assert container["image"] == image
        assert "LD_PRELOAD" not in {e["name"] for e in container.get("env", [])}
    assert world.status["runtime"] == before["runtime"] and [r for r, _ in outcome.alerts] == [Reason.RUNTIME_ALTERED]


def test_with_the_seal_intact_an_edit_is_judged_by_the_copy_as_before() -> None:
    world = World(runtime_doc("guards"))
    planned(world)
    world.edit()
    outcome = world.reconcile()
    status = world.status
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec")
    assert "locks.fields lists guards" in status["message"] and "live GRPORuntime" not in status["message"]
    assert outcome.alerts == []


def test_with_the_seal_intact_an_allowed_edit_is_taken_and_sealed_for_its_generation() -> None:
    world = World(runtime_doc())
    before = planned(world)
    world.edit()
    outcome = world.reconcile()
    status = world.status
    assert status["observedGeneration"] == 2 and validated(status) == ("True", Reason.VALID)
    assert status["runtime"] == before["runtime"]  # the copy stays the run's runtime
    assert status["runtimeDigest"] != before["runtimeDigest"]  # sealed for generation 2
    assert outcome.alerts == [] and status["phase"] == "Pending"
    world.reconcile()  # nothing changed since: the seal verifies, nothing is written
    assert f"patch status {RUN}" not in world.kube.calls


def test_a_sealed_copy_pasted_from_another_run_of_the_same_operator_is_not_used() -> None:
    world = World(runtime_doc("guards"))
    planned(world)
    open_runtime = runtime_doc()
    open_runtime["metadata"]["name"] = "h100-open"
    other = World(open_runtime, kube=world.kube, name="other")  # a run on a runtime that locks nothing
    pasted = planned(other)
    assert pasted["runtime"]["name"] == "h100-open"
    world.tamper(runtime=pasted["runtime"], runtimeDigest=pasted["runtimeDigest"])
    world.edit()
    outcome = world.reconcile()
    assert "locks.fields lists guards" in world.status["message"]
    assert "does not match status.runtimeDigest" in outcome.alerts[0][1]


# --- (b) the live runtime's locks judge an edit ---------------------------------------------------------------


def test_a_lock_added_to_the_live_runtime_after_the_run_was_planned_refuses_a_later_edit_of_that_field() -> None:
    world = World(runtime_doc())
    before = planned(world)
    world.kube.put_runtime(runtime_doc("guards"))  # the platform team locks guards
    world.reconcile()  # no edit: the run goes on as it was planned
    assert world.status["phase"] == "Pending" and world.status["runtime"] == before["runtime"]
    world.edit()
    world.reconcile()
    status = world.status
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec")
    assert (
        "spec.guards" in status["message"] and "locks.fields lists guards in the live GRPORuntime" in status["message"]
    )
    assert status["runtime"] == before["runtime"] and status["runtimeDigest"]  # the copy is kept, sealed


def test_an_edit_passed_off_as_judged_already_is_judged_by_the_live_runtime() -> None:
    """observedGeneration is sealed with the copy: set ahead to the edit's generation, so that the reconcile would
    take the edit as judged and skip the live runtime's locks, it breaks the seal instead."""
    world = World(runtime_doc())
    planned(world)
    world.kube.put_runtime(runtime_doc("guards"))
    world.edit()
    world.tamper(observedGeneration=2)
    outcome = world.reconcile()
    assert world.status["reason"] == "InvalidSpec" and "locks.fields lists guards" in world.status["message"]
    assert [r for r, _ in outcome.alerts] == [Reason.RUNTIME_ALTERED]


def test_the_live_runtime_is_read_for_an_edit_only() -> None:
    world = World(runtime_doc())
    planned(world)
    world.reconcile()
    assert f"get grporuntime {RT}" not in world.kube.calls
    world.edit()
    world.reconcile()
    assert f"get grporuntime {RT}" in world.kube.calls


def test_an_edit_of_a_run_whose_live_runtime_is_gone_is_judged_by_the_copy_alone() -> None:
    world = World(runtime_doc())
    planned(world)
    del world.kube.runtimes[RT]
    world.edit()
    world.reconcile()
    assert world.status["observedGeneration"] == 2 and validated(world.status) == ("True", Reason.VALID)


# --- a rewritten copy and no live runtime ------------------------------------------------------------------------


def test_a_rewritten_copy_with_no_live_runtime_holds_the_run_and_says_so_once_until_the_runtime_exists() -> None:
    world = World(runtime_doc("guards"))
    before = planned(world)
    del world.kube.runtimes[RT]
    world.tamper(runtime=permissive(before["runtime"]))
    world.edit()
    outcome = world.reconcile()
    status = world.status
    assert status["phase"] == before["phase"] and validated(status) == ("False", Reason.RUNTIME_ALTERED)
    for part in (
        "status.runtime",
        "not used",
        f"GRPORuntime {RT} does not exist",
        "until spec.runtimeRef's GRPORuntime",
        "create or fix it",
    ):
        assert part in status["message"], status["message"]
    assert [r for r, _ in outcome.alerts] == [Reason.RUNTIME_ALTERED]
    assert not [c for c in world.kube.calls if c.startswith(("apply", "create"))]  # nothing applied
    assert "runtimeDigest" not in status  # the rewritten copy is never sealed
    assert world.reconcile().alerts == []  # not said again at every reconcile
    world.kube.put_runtime(runtime_doc("guards"))
    outcome = world.reconcile()
    status = world.status
    assert "locks.fields lists guards" in status["message"] and status["reason"] == "InvalidSpec"
    assert "runtime" not in status and "runtimeDigest" not in status


def test_a_run_planned_before_runtimes_were_sealed_is_checked_against_the_live_runtime_once() -> None:
    """An operator before this one wrote status.runtime without a digest: such a copy is not trusted either."""
    world = World(runtime_doc())
    planned(world)
    world.tamper(runtimeDigest=None)
    outcome = world.reconcile()
    assert [r for r, _ in outcome.alerts] == [Reason.RUNTIME_ALTERED]
    assert "has no status.runtimeDigest" in outcome.alerts[0][1]
    assert world.status["runtimeDigest"] and world.reconcile().alerts == []


def test_the_status_key_is_read_once_per_process() -> None:
    world = World(runtime_doc())
    planned(world)
    world.edit()
    world.reconcile()
    assert not [c for c in world.kube.calls if c.startswith("get secret")]


@pytest.mark.parametrize(
    ("defaults", "field"),
    [
        pytest.param({"env": {"HF_TOKEN": "hf_x"}}, "spec.defaults.env.HF_TOKEN", id="reserved-env"),
        pytest.param({"storage": {"mountPath": "/usr"}}, "spec.defaults.storage.mountPath", id="system-mount"),
        pytest.param(
            {"scheduling": {"headResources": {"cpu": "2", "memory": "8"}}},
            "spec.defaults.scheduling.headResources.memory",
            id="memory-without-unit",
        ),
    ],
)
def test_a_runtime_grpo_validate_refuses_is_refused_by_the_operator_too_naming_the_field(
    defaults: dict[str, Any], field: str
) -> None:
    doc = runtime_doc()
    doc["spec"]["defaults"] |= defaults
    world = World(doc)
    world.reconcile()
    status = world.status
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec"), status
    assert status["message"].startswith(f"GRPORuntime h100-ib: {field}: "), status["message"]
    assert not [c for c in world.kube.calls if c.startswith(("apply", "create"))], world.kube.calls
