"""namesrv-admin as a subprocess against two real namesrv processes and a registered broker:
every subcommand with --json, the human tables, per-server reporting and failure exit codes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from namesrv.client import BrokerIdentity, BrokerService, BrokerTopicTable
from namesrv.client.connection import ZMQ_HINT
from namesrv.protocol import TopicConfig

ROOT = Path(__file__).resolve().parent.parent
BROKER = BrokerIdentity("AdminCluster", "broker-x", "127.0.0.1:40911", 0, "127.0.0.1:40912")
TOPICS = ["AdminTopic0", "AdminTopic1", "AdminTopic2"]


def admin(*args: str, check: int | None = 0) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    result = subprocess.run([sys.executable, "-m", "namesrv.admin", *args], capture_output=True, text=True,
                            cwd=ROOT, env=env, timeout=60)
    if check is not None:
        assert result.returncode == check, (result.returncode, result.stdout, result.stderr)
    return result


def admin_json(*args: str) -> object:
    return json.loads(admin(*args, "--json").stdout)


@pytest.fixture
def cluster(namesrv_factory):
    """Two NameServers and one broker registered with both (it re-registers only every 60 s)."""
    servers = namesrv_factory(), namesrv_factory()
    addresses = [s.address for s in servers]
    broker = BrokerService(BROKER, addresses, BrokerTopicTable(TopicConfig(t, 4, 4) for t in TOPICS),
                           period_override_ms=60_000)
    assert len(broker.start()) == 2
    yield servers, ";".join(addresses)
    broker.close()


def test_cluster_list(cluster) -> None:
    _, n = cluster
    info = admin_json("clusterList", "-n", n)
    assert info["clusterAddrTable"] == {"AdminCluster": ["broker-x"]}
    assert info["brokerAddrTable"]["broker-x"]["brokerAddrs"] == {"0": "127.0.0.1:40911"}
    assert admin_json("clusterList", "-n", n, "-c", "Other") == {"brokerAddrTable": {}, "clusterAddrTable": {}}
    table = admin("clusterList", "-n", n).stdout
    assert "#Cluster Name" in table and "AdminCluster" in table and "127.0.0.1:40911" in table


def test_topic_route_and_topic_list(cluster) -> None:
    _, n = cluster
    route = admin_json("topicRoute", "-n", n, "-t", "AdminTopic1")
    assert route["queueDatas"] == [{"brokerName": "broker-x", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
                                    "writeQueueNums": 4}]
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:40911"}
    assert "broker-x" in admin("topicRoute", "-n", n, "-t", "AdminTopic1").stdout
    missing = admin("topicRoute", "-n", n, "-t", "Missing", check=1)
    assert "No topic route info in name server for the topic: Missing" in missing.stderr and missing.stdout == ""
    assert admin_json("topicList", "-n", n) == {"topicList": TOPICS}
    assert admin_json("topicList", "-n", n, "-c") == {
        "topicList": [{"clusterName": "AdminCluster", "topic": t} for t in TOPICS]}
    assert admin("topicList", "-n", n).stdout.split() == TOPICS


def test_kv_config_round_trip_on_every_namesrv(cluster) -> None:
    servers, n = cluster
    results = admin_json("updateKvConfig", "-n", n, "-s", "ORDER_TOPIC_CONFIG", "-k", "AdminTopic0", "-v", "broker-x:2")
    assert [(r["namesrvAddr"], r["success"]) for r in results] == [(s.address, True) for s in servers]
    for server in servers:
        assert admin_json("getKvConfig", "-n", server.address, "-s", "ORDER_TOPIC_CONFIG", "-k", "AdminTopic0") == {
            "namespace": "ORDER_TOPIC_CONFIG", "key": "AdminTopic0", "value": "broker-x:2"}
    assert "value: broker-x:2" in admin("getKvConfig", "-n", n, "-s", "ORDER_TOPIC_CONFIG", "-k", "AdminTopic0").stdout
    results = admin_json("deleteKvConfig", "-n", n, "-s", "ORDER_TOPIC_CONFIG", "-k", "AdminTopic0")
    assert all(r["success"] for r in results) and len(results) == 2
    gone = admin("getKvConfig", "-n", n, "-s", "ORDER_TOPIC_CONFIG", "-k", "AdminTopic0", check=1)
    assert "No config item, Namespace: ORDER_TOPIC_CONFIG Key: AdminTopic0" in gone.stderr


def test_wipe_and_add_write_perm(cluster) -> None:
    servers, n = cluster
    wiped = admin_json("wipeWritePerm", "-n", n, "-b", "broker-x")
    assert [(r["namesrvAddr"], r["success"], r["wipeTopicCount"]) for r in wiped] == \
        [(s.address, True, 3) for s in servers]
    for server in servers:
        assert admin_json("topicRoute", "-n", server.address, "-t", "AdminTopic2")["queueDatas"][0]["perm"] == 4
    added = admin_json("addWritePerm", "-n", n, "-b", "broker-x")
    assert [r["addTopicCount"] for r in added] == [3, 3]
    assert admin_json("topicRoute", "-n", n, "-t", "AdminTopic2")["queueDatas"][0]["perm"] == 6
    text = admin("wipeWritePerm", "-n", n, "-b", "broker-x").stdout
    assert text.count("OK, wipeTopicCount=3") == 2


def test_delete_topic(cluster) -> None:
    servers, n = cluster
    assert all(r["success"] for r in admin_json("deleteTopic", "-n", n, "-t", "AdminTopic0", "-c", "AdminCluster"))
    assert all(r["success"] for r in admin_json("deleteTopic", "-n", n, "-t", "AdminTopic1"))
    for server in servers:
        assert admin_json("topicList", "-n", server.address) == {"topicList": ["AdminTopic2"]}


def test_get_and_update_namesrv_config(cluster) -> None:
    servers, n = cluster
    configs = admin_json("getNamesrvConfig", "-n", n)
    assert sorted(configs) == sorted(s.address for s in servers)
    for server in servers:
        assert configs[server.address]["listenPort"] == server.address.rsplit(":", 1)[1]
        assert configs[server.address]["orderMessageEnable"] == "false"
    results = admin_json("updateNamesrvConfig", "-n", n, "-k", "orderMessageEnable", "-v", "true")
    assert [r["success"] for r in results] == [True, True]
    assert all(c["orderMessageEnable"] == "true" for c in admin_json("getNamesrvConfig", "-n", n).values())
    text = admin("getNamesrvConfig", "-n", n).stdout
    assert text.count("============") == 4 and "orderMessageEnable" in text
    refused = admin("updateNamesrvConfig", "-n", n, "-k", "kvConfigPath", "-v", "/tmp/x", "--json", check=1)
    assert [r["code"] for r in json.loads(refused.stdout)] == [16, 16]
    assert refused.stderr.count("response code 16") == 2


def test_a_misspelled_key_is_unknown_said_once_per_server(namesrv_factory) -> None:
    server = namesrv_factory()
    result = admin("updateNamesrvConfig", "-n", server.address, "-k", "scanNotActiveBrokerIntervl", "-v", "1000",
                   check=1)
    assert result.stdout == ""
    assert result.stderr == (
        f"namesrv-admin updateNamesrvConfig: update name server config scanNotActiveBrokerIntervl=1000 on "
        f"{server.address} failed: Can not update config scanNotActiveBrokerIntervl: unknown key (did you mean "
        f"scanNotActiveBrokerInterval?) (response code 16, NO_PERMISSION)\n")


def test_a_plain_client_at_the_zeromq_port_is_told_so(namesrv_factory) -> None:
    """libzmq answers a RocketMQ frame with its greeting, or resets the connection first: either way,
    the one line says what the port is."""
    zmq_port = namesrv_factory().zmq_address.removeprefix("tcp://")
    for _ in range(4):  # both of libzmq's ways, most likely
        result = admin("clusterList", "-n", zmq_port, check=1)
        assert result.stdout == ""
        assert result.stderr in (
            f"namesrv-admin clusterList: bad frame from {zmq_port}: {ZMQ_HINT}\n",
            f"namesrv-admin clusterList: connection to {zmq_port} reset by the server before any answer: {ZMQ_HINT}\n")


def test_a_plain_client_at_an_enforcing_tls_port_is_told_to_try_tls(namesrv_factory) -> None:
    server = namesrv_factory(tlsMode="enforcing")
    for command in (["clusterList"], ["updateKvConfig", "-s", "NS", "-k", "k", "-v", "v"]):
        result = admin(*command, "-n", server.address, check=1)
        what = "" if command == ["clusterList"] else f"update kv config [NS] k=v on {server.address} failed: "
        assert (result.stdout, result.stderr) == ("", (
            f"namesrv-admin {command[0]}: {what}connection to {server.address} closed by the server before any "
            f"answer: the server may require TLS (--tls)\n"))
    assert admin("clusterList", "-n", server.address, "--tls", "--json").returncode == 0


def test_an_update_against_a_server_run_from_the_repos_config_file_changes_one_line(namesrv_factory,
                                                                                    tmp_path) -> None:
    """`make run`'s situation: -c conf/namesrv.properties plus command-line overrides (port, KV file).
    The update rewrites its one line; comments, layout and the overrides stay out of the file."""
    config_file = tmp_path / "namesrv.properties"
    original = (ROOT / "conf" / "namesrv.properties").read_text(encoding="utf-8")
    config_file.write_text(original, encoding="utf-8")
    server = namesrv_factory(config_file=config_file, configStorePath=config_file)  # plus listenPort, kvConfigPath
    admin("updateNamesrvConfig", "-n", server.address, "-k", "orderMessageEnable", "-v", "true", "--json")
    updated = config_file.read_text(encoding="utf-8")
    assert updated == original.replace("\norderMessageEnable=false\n", "\norderMessageEnable=true\n")
    assert server.address.rsplit(":", 1)[1] not in updated and "kvConfig.json" not in updated.replace(
        "~/namesrv/kvConfig.json", "")


def test_a_dead_namesrv_is_reported_per_server(cluster, namesrv_factory) -> None:
    servers, _ = cluster
    dead = namesrv_factory()
    dead.kill()
    result = admin("updateKvConfig", "-n", f"{servers[0].address};{dead.address}", "-s", "NS", "-k", "k", "-v", "v",
                   "--json", check=1)
    outcome = {r["namesrvAddr"]: r["success"] for r in json.loads(result.stdout)}
    assert outcome == {servers[0].address: True, dead.address: False}
    assert dead.address in result.stderr
    # a read fails over to the live NameServer
    both = f"{dead.address};{servers[0].address}"
    assert admin_json("getKvConfig", "-n", both, "-s", "NS", "-k", "k")["value"] == "v"


def test_usage_errors_exit_2() -> None:
    assert "no NameServer address" in admin("clusterList", check=2).stderr
    assert "required" in admin("topicRoute", "-n", "127.0.0.1:1", check=2).stderr
    assert admin("noSuchCommand", check=2).returncode == 2


def test_runs_as_a_module_with_help() -> None:
    out = admin("--help").stdout
    for command in ("clusterList", "topicRoute", "topicList", "getKvConfig", "updateKvConfig", "deleteKvConfig",
                    "wipeWritePerm", "addWritePerm", "deleteTopic", "getNamesrvConfig", "updateNamesrvConfig"):
        assert command in out


def test_admin_token_from_the_environment_admits_admin_commands(namesrv_factory) -> None:
    token = "s3cret-admin-token-0123"
    server = namesrv_factory(adminToken=token)
    refused = admin("updateKvConfig", "-n", server.address, "-s", "NS", "-k", "k", "-v", "v", check=1)
    assert "adminToken is missing" in refused.stderr and token not in refused.stderr
    env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    env["NAMESRV_ADMIN_TOKEN"] = token
    result = subprocess.run([sys.executable, "-m", "namesrv.admin", "updateKvConfig", "-n", server.address,
                             "-s", "NS", "-k", "k", "-v", "v"], capture_output=True, text=True, cwd=ROOT, env=env,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert admin_json("getKvConfig", "-n", server.address, "-s", "NS", "-k", "k")["value"] == "v"
    wrong = admin("deleteKvConfig", "-n", server.address, "-s", "NS", "-k", "k", "--token", "x" * 20, check=1)
    assert "does not match" in wrong.stderr
