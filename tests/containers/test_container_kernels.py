"""Kernels in containers, from the outside: the REST v2 contract against real agents with
`--backend container`, a real engine (Podman's API service) and a real local registry."""

from __future__ import annotations

import asyncio

from tests.containers.conftest import registry
from tests.containers.support import KernelMoves, containers_of, logs, remove_image, run_batch
from tests.e2e.cluster import Client, Cluster


async def test_agents_say_they_run_containers(admin: Client, cluster: Cluster) -> None:
    status, agent = await admin.request("GET", "/v2/agents/ctr-agent-1")
    assert status == 200, agent
    assert agent["backend"] == "container"
    assert registry() in agent["registries"]


async def test_a_batch_session_pulls_python_once_and_runs_as_non_root(admin: Client) -> None:
    reference = f"{registry()}/python:3"
    await remove_image(reference)
    async with KernelMoves(admin) as watch:
        first, stdout, _ = await run_batch(admin, "python3 --version; id -u")
        second, stdout2, _ = await run_batch(admin, "python3 --version")
    assert first["status"] == "TERMINATED" and first["result"] == "SUCCESS", (first["status_info"], stdout)
    lines = stdout.split()
    assert "Python" in lines and lines[-1].isdigit() and int(lines[-1]) != 0, stdout
    kernel = first["kernels"][0]
    assert kernel["image"] == reference
    assert kernel["image_digest"].startswith("sha256:"), kernel
    assert watch.pulled(first["id"]), watch.moves  # pulled on first use

    assert second["result"] == "SUCCESS" and "Python 3" in stdout2, second
    assert second["kernels"][0]["image_digest"] == kernel["image_digest"]
    assert not watch.pulled(second["id"]), watch.moves  # held: not pulled again


async def test_a_kernel_sees_only_itself(admin: Client, cluster: Cluster) -> None:
    rpc_port = cluster.agents["ctr-agent-1"].args[cluster.agents["ctr-agent-1"].args.index("--rpc-port") + 1]
    api_port = cluster.api.rsplit(":", 1)[1]
    command = (
        "ps -o pid,args | wc -l; "
        "cat /proc/1/environ | tr '\\0' '\\n' | grep -c SOKOVAN_CLUSTER_SECRET; "
        f"ls {cluster.workdir} 2>&1 | head -1; "
        f"for p in 6379 5432 2379 {api_port} {rpc_port}; do "
        "for h in 127.0.0.1 host.containers.internal; do "
        "if echo | nc -w 1 $h $p >/dev/null 2>&1; then echo REACHED $h:$p; fi; done; done; "
        "echo secret > /tmp/left-behind; echo secret > /dev/shm/left-behind; echo done"
    )
    session, stdout, _ = await run_batch(admin, command, image="shell")
    assert session["result"] == "SUCCESS", (session, stdout)
    assert "REACHED" not in stdout, stdout
    lines = stdout.splitlines()
    assert int(lines[0]) <= 5, stdout  # the header, init, sh, ps and wc
    assert lines[1] == "0", stdout
    assert "No such file" in lines[2], stdout
    _later, stdout2, _ = await run_batch(
        admin, "ls /tmp/left-behind /dev/shm/left-behind 2>&1; echo end", image="shell"
    )
    assert "No such file" in stdout2 and "secret" not in stdout2, stdout2


async def test_memory_past_the_slot_is_oom_killed_and_others_keep_running(admin: Client) -> None:
    idle = await admin.create(image="shell", type="interactive", resources={"cpu": 0.5, "mem": "64m"})
    await admin.wait_status(idle["id"], {"RUNNING"}, within=60)
    session, _, _ = await run_batch(
        admin, "python3 -c \"b = b'x' * (1 << 30); print(len(b))\"", resources={"cpu": 1, "mem": "256m"}
    )
    assert session["status"] == "ERROR", session
    assert session["status_info"]["cause"] == "OOM_KILLED", session
    assert (await admin.get(idle["id"]))["status"] == "RUNNING"
    status, _ = await admin.request("DELETE", f"/v2/sessions/{idle['id']}")
    assert status == 202
    await admin.wait_status(idle["id"], {"TERMINATED"}, within=60)


async def test_one_cpu_slot_is_one_core_of_quota(admin: Client) -> None:
    """Four busy loops under `cpu=1`: the cgroup's quota is one period, and the CPU time the
    cgroup used in 3 s is at most about 3 s (with 2 cores free it would be 6). The lower bound is
    loose: other tests may share this machine's two cores."""
    command = (
        "for i in 1 2 3 4; do (while :; do :; done) & done; "
        "if [ -r /sys/fs/cgroup/cpuacct/cpuacct.usage ]; then "
        "u() { cat /sys/fs/cgroup/cpuacct/cpuacct.usage; }; s=1000000000; "
        "q=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us)/$(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us); "
        "else u() { sed -n 's/usage_usec //p' /sys/fs/cgroup/cpu.stat; }; s=1000000; "
        "q=$(tr ' ' / < /sys/fs/cgroup/cpu.max); fi; "
        "a=$(u); sleep 3; b=$(u); echo $q $s $a $b"
    )
    session, stdout, _ = await run_batch(admin, command, image="shell", resources={"cpu": 1, "mem": "128m"})
    assert session["result"] == "SUCCESS", (session, stdout)
    quota, scale, before, after = stdout.split()[-4:]
    assert quota == "100000/100000", stdout
    cores = (int(after) - int(before)) / int(scale) / 3
    assert 0.2 < cores < 1.2, (cores, stdout)


async def test_a_fork_bomb_meets_the_pids_limit(admin: Client, cluster: Cluster) -> None:
    bomb = await admin.create(
        image="shell",
        type="batch",
        command="f() { f | f & }; f; sleep 5; echo still-here",
        resources={"cpu": 1, "mem": "512m"},
    )
    await admin.wait_status(bomb["id"], {"RUNNING", "TERMINATED", "ERROR"}, within=60)
    await asyncio.sleep(3)
    status, _ = await admin.request("DELETE", f"/v2/sessions/{bomb['id']}?forced=true")
    assert status == 202
    await admin.wait_status(bomb["id"], {"TERMINATED", "ERROR"}, within=60)
    status, agent = await admin.request("GET", "/v2/agents/ctr-agent-1")
    assert agent["status"] == "READY", agent
    ok, out, _ = await run_batch(admin, "echo alive", image="shell")
    assert ok["result"] == "SUCCESS" and "alive" in out


async def test_a_two_kernel_session_finds_its_peer_by_name(admin: Client) -> None:
    command = (
        'echo "$SOKOVAN_CLUSTER_HOST rank=$RANK world=$WORLD_SIZE hosts=$SOKOVAN_CLUSTER_HOSTS '
        'master=$MASTER_ADDR:$MASTER_PORT"; '
        'if [ "$SOKOVAN_CLUSTER_ROLE" = main ]; then echo pong | nc -l -p 7000 -w 20; '
        "else for i in $(seq 1 50); do echo ping | nc -w 1 main1 7000 && break; sleep 0.3; done; fi"
    )
    created = await admin.create(
        image="shell",
        type="batch",
        command=command,
        cluster_size=2,
        cluster_mode="multi-node",
        resources={"cpu": 0.5, "mem": "64m"},
    )
    session = await admin.wait_status(created["id"], {"TERMINATED", "ERROR"}, within=90)
    _status, data = await admin.request("GET", f"/v2/sessions/{created['id']}/logs")
    outputs = {item["stdout"].split()[0]: item["stdout"] for item in data["items"] if item["stdout"]}
    assert session["result"] == "SUCCESS", (session, data)
    assert "rank=0 world=2 hosts=main1,sub1 master=main1:29500" in outputs["main1"], outputs
    assert "rank=1 world=2" in outputs["sub1"], outputs
    assert "ping" in outputs["main1"] and "pong" in outputs["sub1"], outputs


async def test_an_image_that_cannot_be_had_fails_the_session_and_leaves_nothing(admin: Client) -> None:
    session, _, _ = await run_batch(admin, "true", image="no-such-image:1")
    assert session["status"] == "ERROR", session
    assert session["status_info"]["cause"] == "IMAGE_PULL_FAILURE", session
    assert "no-such-image" in session["status_info"]["message"], session
    assert await containers_of(session["kernels"][0]["id"]) == []

    down = await run_batch(admin, "true", image="127.0.0.1:9/shell:latest")
    assert down[0]["status_info"]["cause"] == "IMAGE_PULL_FAILURE", down[0]
    assert await containers_of(down[0]["kernels"][0]["id"]) == []


async def test_an_image_no_agent_may_pull_is_refused(admin: Client) -> None:
    status, problem = await admin.request(
        "POST",
        "/v2/sessions",
        {"image": "elsewhere.example:5000/x:1", "type": "batch", "command": "true"},
    )
    assert status == 422, problem


async def test_logs_outlive_the_container(admin: Client) -> None:
    session, stdout, stderr = await run_batch(admin, "echo to-out; echo to-err >&2", image="shell")
    assert "to-out" in stdout and "to-err" in stderr
    assert await containers_of(session["kernels"][0]["id"]) == []
    again = await logs(admin, session["id"])
    assert again == (stdout, stderr)
