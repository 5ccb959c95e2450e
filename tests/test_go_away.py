"""Graceful shutdown with GO_AWAY (RocketMQ 5.x): on SIGTERM with enableShutdownGracefully, clients
newer than 5.3.1 are answered GO_AWAY and move on, older ones are served as before; the wait ends
once every connection was told, or after shutdownWaitTimeSeconds. Driven through the dispatcher
directly and end to end (real servers, namesrv's client failing over, the real Java mqadmin 4.9.8)."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from namesrv.channel import Channel
from namesrv.client import NamesrvClient
from namesrv.config import NamesrvConfig
from namesrv.protocol import RemotingCommand
from namesrv.protocol.codes import RequestCode, ResponseCode, Version
from namesrv.remoting.budget import RequestBudget
from namesrv.remoting.dispatch import GO_AWAY_REMARK, RequestDispatcher
from namesrv.remoting.outbox import Outbox
from test_operator_http import RMQ, java_reference_skip_reason


class Echo:
    def process(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS)


def test_the_dispatcher_answers_go_away_only_to_clients_that_understand_it() -> None:
    config = NamesrvConfig()
    budget = RequestBudget.from_config(config)
    dispatcher = RequestDispatcher(config, Echo(), Outbox(budget), pool_of={}, budget=budget)
    new, old, quiet = (Channel("tcp", bytes([n]), f"10.0.0.{n}:1") for n in (1, 2, 3))
    jobs = [(new, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, opaque=1,
                                          version=Version.V5_3_3), 0.0),
            (old, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, opaque=2,
                                          version=Version.V5_3_1), 0.0),
            (new, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, {}, opaque=3, oneway=True,
                                          version=Version.V5_3_3), 0.0)]
    try:
        assert dispatcher.dispatch(list(jobs)) == []  # not going away: every request to an executor
        dispatcher.going_away = True
        replies = dispatcher.dispatch(list(jobs))
        assert [channel for channel, _ in replies] == [new]
        answer = RemotingCommand.decode(replies[0][1][4:])
        assert (answer.code, answer.remark, answer.opaque) == (ResponseCode.GO_AWAY, GO_AWAY_REMARK, 1)
        assert dispatcher.told_go_away == {new} and dispatcher.served_old == {old}
        assert quiet not in dispatcher.told_go_away | dispatcher.served_old
    finally:
        dispatcher.shutdown(5)


def sigterm(server) -> float:
    os.kill(server.pid, signal.SIGTERM)
    return time.monotonic()


def test_sigterm_tells_new_clients_serves_old_ones_and_ends_once_all_were_told(namesrv_factory, raw_connect) -> None:
    server = namesrv_factory(enableShutdownGracefully="true", shutdownWaitTimeSeconds=20)
    new, old = raw_connect(server.address), raw_connect(server.address)
    route = {"topic": "TBW102"}
    assert new.call(new.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, route)).code == ResponseCode.TOPIC_NOT_EXIST
    signalled = sigterm(server)
    server.wait_for_log(r"answering GO_AWAY to RocketMQ 5.3.2\+ clients for up to 20 s \(open connections: 2 tcp")
    answer = new.call(new.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, route))  # the inline path is off too
    assert (answer.code, answer.remark) == (ResponseCode.GO_AWAY, "please go away")
    for _ in range(2):  # an older client is served as before, as often as it asks
        served = old.call(old.request(RequestCode.GET_BROKER_CLUSTER_INFO, version=Version.V4_9_8))
        assert served.code == ResponseCode.SUCCESS
    assert server.wait(15) == 0
    assert time.monotonic() - signalled < 5  # every connection settled: no need to wait 20 s
    assert "every connection told after" in server.log_text()
    assert "1 GO_AWAY answers on 1 connections; 1 connections of older clients served" in server.log_text()


def test_a_silent_connection_keeps_the_wait_up_to_shutdown_wait_time(namesrv_factory, raw_connect) -> None:
    server = namesrv_factory(enableShutdownGracefully="true", shutdownWaitTimeSeconds=2)
    silent = raw_connect(server.address)
    signalled = sigterm(server)
    assert server.wait(15) == 0
    assert 1.9 < time.monotonic() - signalled < 8
    assert "shutdownWaitTimeSeconds passed after" in server.log_text()
    assert silent.closed_by_server(5)


def test_without_enable_shutdown_gracefully_sigterm_stops_at_once_without_go_away(namesrv_factory,
                                                                                  raw_connect) -> None:
    server = namesrv_factory()
    raw_connect(server.address)
    signalled = sigterm(server)
    assert server.wait(15) == 0
    assert time.monotonic() - signalled < 3
    assert "GO_AWAY" not in server.log_text()


def test_namesrv_client_moves_to_the_next_nameserver_on_go_away(namesrv_factory) -> None:
    leaving = namesrv_factory(enableShutdownGracefully="true", shutdownWaitTimeSeconds=20)
    staying = namesrv_factory()
    with NamesrvClient([leaving.address, staying.address], timeout=3) as client:
        while client.current_address != leaving.address:  # start on the server that will leave
            client._target._index = (client._target._index + 1) % 2
        client.get_cluster_info()
        sigterm(leaving)
        leaving.wait_for_log(r"answering GO_AWAY")
        started = time.monotonic()
        assert client.get_cluster_info().broker_addr_table == {}  # answered by the other server
        assert time.monotonic() - started < 1  # no timeout on the way
        assert client.current_address == staying.address
    assert leaving.wait(15) == 0
    assert "2 GO_AWAY answers on 2 connections" in leaving.log_text()  # the call and its retry


@pytest.mark.skipif(java_reference_skip_reason() is not None, reason=str(java_reference_skip_reason()))
def test_an_old_java_client_is_served_while_the_server_goes_away(namesrv_factory, raw_connect, tmp_path) -> None:
    """mqadmin 4.9.8 (which would take GO_AWAY for an error) works as usual during the graceful wait."""
    server = namesrv_factory(enableShutdownGracefully="true", shutdownWaitTimeSeconds=60)
    raw_connect(server.address)  # silent: keeps the wait open while mqadmin runs
    sigterm(server)
    server.wait_for_log(r"answering GO_AWAY")
    env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    env["ROCKETMQ_REF_RUN"] = str(tmp_path / "rmq")
    result = subprocess.run([RMQ / "bin" / "mqadmin", "clusterList", "-n", server.address], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "#Cluster Name" in result.stdout
    assert server.returncode is None  # still waiting for the silent connection
