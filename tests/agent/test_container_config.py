"""The pure parts of the container backend: the create request of a kernel, its cluster
variables, its labels read back, and the firewall rules of a session network."""

from __future__ import annotations

import pytest

from sokovan.agent.container.cluster_env import cluster_environ, hostnames
from sokovan.agent.container.config import ContainerOptions, KernelPlacement, create_request
from sokovan.agent.container.firewall import rules
from sokovan.agent.container.labels import KernelLabels
from sokovan.common.rpc import KernelSpec

LIMITS = [{"Name": "nofile", "Soft": 1024, "Hard": 1024}]


def spec(**extra: object) -> KernelSpec:
    base: dict[str, object] = {
        "kernel_id": "k1",
        "session_id": "s1",
        "image": "python:3",
        "command": "echo hi",
        "slots": {"cpu": "1.5", "mem": "268435456"},
    }
    return KernelSpec.model_validate(base | extra)


def labels() -> KernelLabels:
    return KernelLabels(kernel_id="k1", session_id="s1", agent_id="a1", image="r:5000/python:3")


def test_a_batch_kernel_gets_its_slots_as_limits_and_no_network() -> None:
    body = create_request(
        spec(),
        KernelPlacement("r:5000/python:3", "20001:20001", None, None),
        labels(),
        ContainerOptions(),
        LIMITS,
    )
    host = body["HostConfig"]
    assert host["Memory"] == host["MemorySwap"] == 268435456
    assert host["CpuQuota"] / host["CpuPeriod"] == 1.5
    assert host["PidsLimit"] == 1024
    assert host["NetworkMode"] == "none" and "NetworkingConfig" not in body
    assert host["Init"] is True and host["SecurityOpt"] == ["no-new-privileges"]
    assert "NET_RAW" in host["CapDrop"]
    assert host["Tmpfs"]["/home/work"].endswith("mode=0700,U") and "/tmp" in host["Tmpfs"]
    assert body["User"] == "20001:20001" and body["WorkingDir"] == "/home/work"
    assert body["Entrypoint"] == ["/bin/sh", "-c"] and body["Cmd"] == ["echo hi"]
    assert body["Hostname"] == "main1"
    env = dict(item.split("=", 1) for item in body["Env"])
    assert env["SOKOVAN_KERNEL_ID"] == "k1" and env["SOKOVAN_SESSION_ID"] == "s1"
    assert "PORT" not in env and "SOKOVAN_CLUSTER_SECRET" not in env


def test_an_inference_kernel_publishes_its_port_on_the_service_host() -> None:
    placement = KernelPlacement("img", "20001:20001", "sokovan-s1", 31000, "127.0.0.1")
    body = create_request(spec(session_type="inference"), placement, labels(), ContainerOptions(), LIMITS)
    assert body["HostConfig"]["PortBindings"] == {"31000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "31000"}]}
    env = dict(item.split("=", 1) for item in body["Env"])
    assert env["PORT"] == "31000"
    assert body["NetworkingConfig"]["EndpointsConfig"]["sokovan-s1"]["Aliases"] == ["main1"]


def test_the_session_environ_cannot_override_the_agents_variables() -> None:
    body = create_request(
        spec(environ={"SOKOVAN_KERNEL_ID": "forged", "PORT": "1", "MASTER_PORT": "1234", "RANK": "7"}),
        KernelPlacement("img", "1:1", None, 40000),
        labels(),
        ContainerOptions(),
        LIMITS,
    )
    env = dict(item.split("=", 1) for item in body["Env"])
    assert env["SOKOVAN_KERNEL_ID"] == "k1" and env["PORT"] == "40000"
    assert env["MASTER_PORT"] == "1234" and env["RANK"] == "7"  # the user's own choice


def test_an_interactive_kernel_without_a_command_idles() -> None:
    body = create_request(
        spec(command=None), KernelPlacement("img", "1:1", None, None), labels(), ContainerOptions(), LIMITS
    )
    assert "sleep" in body["Cmd"][0]


@pytest.mark.parametrize(
    ("size", "idx", "want"),
    [
        (
            1,
            0,
            {
                "SOKOVAN_CLUSTER_HOSTS": "main1",
                "SOKOVAN_CLUSTER_ROLE": "main",
                "RANK": "0",
                "WORLD_SIZE": "1",
            },
        ),
        (
            3,
            0,
            {"SOKOVAN_CLUSTER_HOSTS": "main1,sub1,sub2", "SOKOVAN_CLUSTER_HOST": "main1", "NODE_RANK": "0"},
        ),
        (
            3,
            2,
            {
                "SOKOVAN_CLUSTER_HOST": "sub2",
                "SOKOVAN_CLUSTER_ROLE": "sub",
                "SOKOVAN_CLUSTER_IDX": "2",
                "RANK": "2",
            },
        ),
    ],
)
def test_cluster_variables(size: int, idx: int, want: dict[str, str]) -> None:
    env = cluster_environ(size, idx, {})
    assert env["MASTER_ADDR"] == "main1" and env["MASTER_PORT"] == "29500"
    assert want.items() <= env.items()


def test_hostnames() -> None:
    assert hostnames(3) == ["main1", "sub1", "sub2"]


def test_labels_round_trip() -> None:
    info = KernelLabels(
        "k", "s", "a", "r/i:1", "sha256:" + "0" * 64, 31000, 20001, 7, "http://127.0.0.1:31000"
    )
    assert KernelLabels.from_labels(info.to_labels()) == info
    assert KernelLabels.from_labels({"org.sokovan.kernel-id": "k"}) is None


def test_firewall_rules_reject_new_connections_but_dns() -> None:
    table = rules("sokovan-s1", "10.89.3.0/24", "10.89.3.1", outbound=False)
    chains = [chain for chain, _ in table]
    assert chains == ["INPUT", "INPUT", "INPUT", "FORWARD"]
    assert table[0][1][-1] == "ACCEPT" and "53" in table[0][1]
    assert table[2][1][-1] == "REJECT" and "NEW" in table[2][1]
    assert "!" in table[3][1]
    assert [c for c, _ in rules("n", "10.0.0.0/24", None, outbound=True)] == ["INPUT"]
