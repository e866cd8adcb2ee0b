"""The preflight's InfiniBand and RoCE checks read ibv_devinfo's report: enough HCAs with an active port of the link layer.

The stand-in prints what rdma-core's ibv_devinfo prints (libibverbs/examples/devinfo.c at 691953d8: `hca_id:\t%s`,
per port `\t\tport:\t%u`, `\t\t\tstate:\t\t\t%s (%d)`, `\t\t\tlink_layer:\t\t%s`; "No IB devices found" on stderr
and exit status 255 without a device), docs/integrations/rdma-core.md.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from grpo_launcher.checks import Status
from grpo_launcher.host_checks import FABRIC_CHECKS, HostPaths, check_infiniband, check_roce, parse_ibv_devinfo

from tests.support.launcher import executable


def hca(name: str, state: str = "PORT_ACTIVE (4)", link: str = "InfiniBand") -> str:
    return (
        f"hca_id:\t{name}\n"
        "\ttransport:\t\t\tInfiniBand (0)\n"
        "\tfw_ver:\t\t\t\t28.39.1002\n"
        "\tnode_guid:\t\t\t0c42:a103:00a5:1b2c\n"
        "\tsys_image_guid:\t\t\t0c42:a103:00a5:1b2c\n"
        "\tvendor_id:\t\t\t0x02c9\n"
        "\tvendor_part_id:\t\t\t4129\n"
        "\thw_ver:\t\t\t\t0x0\n"
        "\tboard_id:\t\t\tMT_0000000838\n"
        "\tphys_port_cnt:\t\t\t1\n"
        "\t\tport:\t1\n"
        f"\t\t\tstate:\t\t\t{state}\n"
        "\t\t\tmax_mtu:\t\t4096 (5)\n"
        "\t\t\tactive_mtu:\t\t4096 (5)\n"
        "\t\t\tsm_lid:\t\t\t1\n"
        "\t\t\tport_lid:\t\t17\n"
        "\t\t\tport_lmc:\t\t0x00\n"
        f"\t\t\tlink_layer:\t\t{link}\n\n"
    )


def ibv_devinfo(host: HostPaths, report: str, status: int = 0, stderr: str = "") -> HostPaths:
    out = host.ibv_devinfo.parent / "report.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    executable(host.ibv_devinfo, f"cat '{out}'" + (f"; echo '{stderr}' >&2" if stderr else "") + f"; exit {status}")
    return host


def test_the_report_is_read_per_hca_and_port() -> None:
    text = hca("mlx5_0") + hca("mlx5_1", state="PORT_DOWN (1)") + hca("mlx5_bond_0", link="Ethernet")
    assert parse_ibv_devinfo(text) == {
        "mlx5_0": [("PORT_ACTIVE", "InfiniBand")],
        "mlx5_1": [("PORT_DOWN", "InfiniBand")],
        "mlx5_bond_0": [("PORT_ACTIVE", "Ethernet")],
    }


def test_eight_active_infiniband_hcas_pass_for_eight_requested(host: HostPaths) -> None:
    result = check_infiniband(ibv_devinfo(host, "".join(hca(f"mlx5_{i}") for i in range(8))), expected=8)
    assert result.status is Status.PASS, result.reason
    assert "8 InfiniBand devices" in result.reason


def test_a_down_port_or_an_ethernet_port_fails_naming_the_devices(host: HostPaths) -> None:
    report = "".join(hca(f"mlx5_{i}") for i in range(6)) + hca("mlx5_6", state="PORT_DOWN (1)")
    report += hca("mlx5_7", link="Ethernet")
    result = check_infiniband(ibv_devinfo(host, report), expected=8)
    assert result.status is Status.FAIL
    assert "6 InfiniBand devices with an active port" in result.reason
    assert "requests 8" in result.reason and "mlx5_6, mlx5_7" in result.reason


def test_no_device_in_the_pod_fails_with_ibv_devinfos_own_words(host: HostPaths) -> None:
    result = check_infiniband(ibv_devinfo(host, "", status=255, stderr="No IB devices found"), expected=8)
    assert result.status is Status.FAIL
    assert "No IB devices found" in result.reason and "resourceName" in result.reason


def test_a_missing_ibv_devinfo_fails_naming_the_package(host: HostPaths, tmp_path: Path) -> None:
    gone = dataclasses.replace(host, ibv_devinfo=tmp_path / "nowhere" / "ibv_devinfo")
    result = check_infiniband(gone, expected=8)
    assert result.status is Status.FAIL and "ibverbs-utils" in result.reason


def test_roce_wants_active_ethernet_ports_and_refuses_infiniband_ones(host: HostPaths) -> None:
    # A RoCE NIC reports its port's link layer as Ethernet; the fabric table sends fabric roce to this check.
    roce = "".join(hca(f"mlx5_{i}", link="Ethernet") for i in range(8))
    result = FABRIC_CHECKS["roce"](ibv_devinfo(host, roce), 8)
    assert result.status is Status.PASS and "8 RoCE devices with an active port" in result.reason, result.reason
    result = check_roce(ibv_devinfo(host, "".join(hca(f"mlx5_{i}") for i in range(8))), expected=8)
    assert result.status is Status.FAIL and "0 RoCE devices with an active port" in result.reason
    assert "not active or not RoCE: mlx5_0" in result.reason


def test_the_run_configs_fabric_picks_the_check_of_its_type() -> None:
    assert set(FABRIC_CHECKS) == {"efa", "infiniband", "roce", "none"}
    assert FABRIC_CHECKS["none"](HostPaths(), 0).status is Status.PASS
