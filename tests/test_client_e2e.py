"""The client against real namesrv processes on 127.0.0.1: pipelining, error codes, both header
codecs, timeouts, reconnect after a restart, failover between NameServers, the TBW102 fallback
and route cache, and the ZeroMQ DEALER client."""
from __future__ import annotations

import asyncio
import time

import pytest

from process_control import frozen
from namesrv.client import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    AsyncBrokerOuterAPI,
    AsyncNamesrvClient,
    AsyncRemotingClient,
    BrokerIdentity,
    MQResponseError,
    NamesrvClient,
    RemotingClient,
    RemotingConnectError,
    RemotingTimeoutError,
)
from namesrv.protocol import (
    DataVersion,
    RequestCode,
    ResponseCode,
    SerializeType,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from namesrv.protocol.msgpack_codec import SERIALIZE_MSGPACK

IDENTITY = BrokerIdentity("ClientCluster", "broker-c", "127.0.0.1:30911", 0, "127.0.0.1:30912")


def run(coroutine: object) -> object:
    return asyncio.run(asyncio.wait_for(coroutine, 60))  # type: ignore[arg-type]




def topics_with_distinct_queue_counts(count: int) -> TopicConfigSerializeWrapper:
    """Topic i has i+1 queues, so a route names the topic it belongs to."""
    table = {f"T{i}": TopicConfig(f"T{i}", i + 1, i + 1) for i in range(count)}
    table[AUTO_CREATE_TOPIC_KEY_TOPIC] = TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, 8, 8)
    return TopicConfigSerializeWrapper(table, DataVersion(1, 1_700_000_000_000, 0))


async def register(address: str, client: AsyncRemotingClient, count: int = 50) -> None:
    api = AsyncBrokerOuterAPI([address], remoting=client, timeout=5)
    results = await api.register_broker_all(IDENTITY, topics_with_distinct_queue_counts(count))
    assert list(results) == [address]


@pytest.fixture
def namesrv(namesrv_factory):
    return namesrv_factory()


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_pipelined_requests_are_matched_to_their_own_responses(namesrv, serialize_type: SerializeType) -> None:
    async def scenario() -> None:
        async with AsyncRemotingClient(serialize_type=serialize_type, timeout=20) as client:
            await register(namesrv.address, client)
            requests = [client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": f"T{i % 50}"})
                        for i in range(2000)]
            responses = await client.invoke_many(namesrv.address, requests)
            for i, response in enumerate(responses):
                assert response.code == ResponseCode.SUCCESS, response
                assert response.serialize_type == serialize_type
                route = TopicRouteData.decode(response.body)
                assert route.queue_datas[0].write_queue_nums == i % 50 + 1
            concurrent = await asyncio.gather(*(client.get_route_info_by_topic(namesrv.address, f"T{i}")
                                                for i in range(50)))
            assert [r.queue_datas[0].read_queue_nums for r in concurrent] == list(range(1, 51))
    run(scenario())


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_error_answers_carry_code_and_remark(namesrv, serialize_type: SerializeType) -> None:
    with RemotingClient(serialize_type=serialize_type) as client:
        with pytest.raises(MQResponseError) as info:
            client.get_route_info_by_topic(namesrv.address, "NoSuchTopic")
        assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
        assert "No topic route info in name server for the topic: NoSuchTopic" in info.value.remark
        assert info.value.address == namesrv.address
        with pytest.raises(MQResponseError) as info:
            client.get_kv_config(namesrv.address, "NS", "missing")
        assert info.value.code == ResponseCode.QUERY_NOT_FOUND
        assert info.value.remark == "No config item, Namespace: NS Key: missing"
        client.put_kv_config(namesrv.address, "NS", "k", "v1")
        assert client.get_kv_config(namesrv.address, "NS", "k") == "v1"
        assert client.get_kv_list_by_namespace(namesrv.address, "NS") == {"k": "v1"}
        client.delete_kv_config(namesrv.address, "NS", "k")
        with pytest.raises(MQResponseError):
            client.get_kv_config(namesrv.address, "NS", "k")


def test_timeout_while_the_server_is_frozen_then_it_answers_again(namesrv) -> None:
    with RemotingClient(timeout=1) as client:
        assert client.get_all_topic_list(namesrv.address).topic_list == []
        with frozen(namesrv.pid):
            started = time.monotonic()
            with pytest.raises(RemotingTimeoutError):
                client.get_broker_cluster_info(namesrv.address)  # the client's default timeout
            assert 0.9 < time.monotonic() - started < 3
            with pytest.raises(RemotingTimeoutError):
                client.invoke(namesrv.address, client.request(RequestCode.GET_BROKER_CLUSTER_INFO), 0.3)
        assert client.get_broker_cluster_info(namesrv.address).broker_addr_table == {}


def test_reconnects_after_the_server_restarts_on_the_same_port(namesrv_factory) -> None:
    first = namesrv_factory()
    port = first.address.rsplit(":", 1)[1]
    with RemotingClient(timeout=5) as client:
        client.put_kv_config(first.address, "NS", "k", "before")
        first.kill()
        with pytest.raises(RemotingConnectError):
            client.get_broker_cluster_info(first.address)
        second = namesrv_factory(listenPort=port)
        assert second.address == first.address
        client.put_kv_config(second.address, "NS", "k", "after")
        assert client.get_kv_config(second.address, "NS", "k") == "after"


def test_reads_fail_over_to_the_next_namesrv(namesrv_factory) -> None:
    dead, alive = namesrv_factory(), namesrv_factory()
    dead.kill()
    with NamesrvClient([dead.address, alive.address], timeout=2) as client:
        for _ in range(3):  # whichever it starts with, every read succeeds and it settles on the live one
            assert client.get_all_topic_list() == []
        assert client.current_address == alive.address
        results = client.put_kv_config("NS", "k", "v")
        assert [(r.address, r.ok) for r in results] == [(dead.address, False), (alive.address, True)]
        assert isinstance(results[0].error, RemotingConnectError)


def test_unknown_topic_borrows_tbw102_and_the_cache_picks_up_the_real_route(namesrv) -> None:
    async def scenario() -> None:
        client = AsyncNamesrvClient([namesrv.address], poll_interval=0.2)
        api = AsyncBrokerOuterAPI([namesrv.address], timeout=5)
        wrapper = topics_with_distinct_queue_counts(3)
        await api.register_broker_all(IDENTITY, wrapper)
        with pytest.raises(MQResponseError):
            await client.get_topic_route("Fresh", use_default_topic=False)
        borrowed = await client.route("Fresh")
        assert [(q.broker_name, q.write_queue_nums) for q in borrowed.queue_datas] == [("broker-c", 4)]
        assert client.is_default_route("Fresh")
        assert len(await client.publish_queues("Fresh")) == 4
        await client.start()
        wrapper.topic_config_table["Fresh"] = TopicConfig("Fresh", 6, 6)  # the broker auto-created it
        wrapper.data_version = wrapper.data_version.next_version(1_700_000_000_001)
        await api.register_broker_all(IDENTITY, wrapper)
        deadline = time.monotonic() + 5
        while client.is_default_route("Fresh") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not client.is_default_route("Fresh")
        assert (await client.route("Fresh")).queue_datas[0].write_queue_nums == 6
        await client.close()
        await api.close()
    run(scenario())


def test_zeromq_dealer_client_speaks_the_same_api(namesrv) -> None:
    async def scenario() -> None:
        async with AsyncRemotingClient(transport="zmq", timeout=10) as client:
            address = namesrv.zmq_address
            await register(address, client)
            route = await client.get_route_info_by_topic(address, "T7")
            assert route.queue_datas[0].write_queue_nums == 8
            with pytest.raises(MQResponseError) as info:
                await client.get_route_info_by_topic(address, "Nope")
            assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
            requests = [client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": f"T{i % 50}"})
                        for i in range(500)]
            responses = await client.invoke_many(address, requests)
            assert all(r.serialize_type == SERIALIZE_MSGPACK for r in responses)
            assert [TopicRouteData.decode(r.body).queue_datas[0].read_queue_nums for r in responses] == \
                [i % 50 + 1 for i in range(500)]
            await client.put_kv_config(address, "Z", "k", "v")
        with RemotingClient() as tcp:  # what went in over ZeroMQ is visible over TCP
            assert tcp.get_kv_config(namesrv.address, "Z", "k") == "v"
            assert "T7" in tcp.get_all_topic_list(namesrv.address).topic_list
    run(scenario())


def test_zeromq_call_to_a_frozen_server_times_out(namesrv) -> None:
    async def scenario() -> None:
        async with AsyncRemotingClient(transport="zmq", timeout=0.3) as client:
            await client.get_broker_cluster_info(namesrv.zmq_address)
            with frozen(namesrv.pid), pytest.raises(RemotingTimeoutError):
                await client.get_broker_cluster_info(namesrv.zmq_address)
            await client.get_broker_cluster_info(namesrv.zmq_address)
    run(scenario())
