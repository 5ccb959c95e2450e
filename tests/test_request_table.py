"""The request table (namesrv.processor.requests) against RocketMQ's own code lists, and honest rows.

Every request code a RocketMQ 4.9.x or 5.x NameServer serves must be declared; the codes it does
not serve on its port are answered REQUEST_CODE_NOT_SUPPORTED, knowingly. A code whose handler is
not a `WriteHandler` must not change anything, whatever the request carries: a write declared as a
read would let worker processes drift apart silently, so it is checked by running every read code
against populated tables.
"""
from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_processor import BROKER, Namesrv

from namesrv.processor.requests import (ADMIN_CODES, BY_CODE, PERSISTED_CODES, POOL_OF, REQUESTS, SUPPORTED_CODES,
                                        WRITE_CODES, Inline)
from namesrv.protocol import RequestCode, ResponseCode
from namesrv.security import AdminGuard

#: RocketMQ 4.9.8's DefaultRequestProcessor.processRequest switch (checked against the jar below).
ROCKETMQ_4_9_CODES = {100, 101, 102, 103, 104, 105, 106, 205, 206, 216, 219, 224, 304, 311, 312, 313, 318, 319,
                      322, 327}
#: RocketMQ 5.x (apache/rocketmq 8fc57f1): DefaultRequestProcessor's switch and ClientRequestProcessor (105).
ROCKETMQ_5_CODES = {100, 101, 102, 103, 104, 105, 106, 205, 206, 216, 217, 219, 224, 304, 311, 312, 313, 318, 319,
                    322, 327, 901, 904}
#: namesrv's own (namesrv.processor.route_push), in a range RocketMQ does not use.
NAMESRV_CODES = {RequestCode.SUBSCRIBE_ROUTE_CHANGES, RequestCode.UNSUBSCRIBE_ROUTE_CHANGES, RequestCode.EXPLAIN_ROUTE}
#: Codes of the NameServer's world it does not serve on its port, and why.
KNOWINGLY_NOT_SUPPORTED = {
    905: "NOTIFY_MIN_BROKER_ID_CHANGE: a NameServer sends it to brokers, never serves it",
    **{code: "controller code: 5.x serves it on the controller's own port (ControllerManager), not the "
             "NameServer's" for code in range(1001, 1014)},
}
JAR = Path(__file__).resolve().parents[2] / "shared" / "rocketmq-4.9.8" / "lib" / "rocketmq-4.9.8.jar"


def test_every_rocketmq_nameserver_code_is_declared_and_nothing_else() -> None:
    assert SUPPORTED_CODES == ROCKETMQ_4_9_CODES | ROCKETMQ_5_CODES | NAMESRV_CODES
    assert min(NAMESRV_CODES) > max(ROCKETMQ_5_CODES | set(KNOWINGLY_NOT_SUPPORTED)) + 80_000
    assert not SUPPORTED_CODES & set(KNOWINGLY_NOT_SUPPORTED)


def test_the_4_9_8_list_is_the_one_in_the_real_jar() -> None:
    javap = shutil.which("javap")
    if javap is None or not JAR.exists():
        pytest.skip(f"needs javap (a JDK 17) and {JAR}")
    listing = subprocess.run([javap, "-c", "-classpath", str(JAR),
                              "org.apache.rocketmq.namesrv.processor.DefaultRequestProcessor"],
                             capture_output=True, text=True, check=True, timeout=60).stdout
    switch = listing[listing.index("lookupswitch"):]
    switch = switch[:switch.index("default:")]
    assert {int(code) for code in re.findall(r"^\s*(\d+): \d+$", switch, re.M)} == ROCKETMQ_4_9_CODES


@pytest.mark.parametrize("code", sorted(KNOWINGLY_NOT_SUPPORTED))
def test_codes_not_served_here_are_answered_not_supported(tmp_path, code: int) -> None:
    response = Namesrv(tmp_path).call(code, {"brokerName": "b"})
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, KNOWINGLY_NOT_SUPPORTED[code]


def test_the_derived_sets_follow_the_rows() -> None:
    assert [spec.code for spec in REQUESTS] == list(BY_CODE)
    assert ADMIN_CODES == {100, 102, 205, 327, 216, 217, 318, RequestCode.EXPLAIN_ROUTE}
    # An admin request that changes nothing needs no guard, unless it tells who connects from where.
    assert ADMIN_CODES - WRITE_CODES == {RequestCode.EXPLAIN_ROUTE}
    assert WRITE_CODES == {100, 102, 103, 104, 205, 216, 217, 318, 322, 327, 904}
    assert PERSISTED_CODES == {100, 102, 318} and PERSISTED_CODES <= WRITE_CODES
    assert {code for code, pool in POOL_OF.items() if pool == "client"} == {
        RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.SUBSCRIBE_ROUTE_CHANGES, RequestCode.UNSUBSCRIBE_ROUTE_CHANGES}
    assert {spec.code: spec.inline for spec in REQUESTS if spec.inline} == {
        RequestCode.GET_ROUTEINFO_BY_TOPIC: Inline.ROUTE_QUERY, RequestCode.REGISTER_BROKER: Inline.WRITE,
        RequestCode.QUERY_DATA_VERSION: Inline.WRITE, RequestCode.BROKER_HEARTBEAT: Inline.WRITE}


def populated(tmp_path) -> Namesrv:
    ns = Namesrv(tmp_path)
    assert ns.register("broker-a", "10.0.0.1:10911", topics=("T1", "T2")).code == ResponseCode.SUCCESS
    assert ns.register("broker-a", "10.0.0.2:10911", broker_id=1, topics=("T1", "T2")).code == ResponseCode.SUCCESS
    assert ns.register("broker-b", "10.0.0.3:10911", topics=("T2", "T3")).code == ResponseCode.SUCCESS
    assert ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T1",
                                               "value": "broker-a:4"}).code == ResponseCode.SUCCESS
    return ns


def state(ns: Namesrv) -> tuple:
    return (copy.deepcopy(ns.routes.snapshot()), ns.kv.export_table(), ns.config.to_text(reveal_secrets=True))


#: Headers that name what the populated tables hold, so a read code reaches its real work.
READ_HEADERS = {"topic": "T1", "clusterName": "C", "cluster": "C", "brokerName": "broker-a",
                "brokerAddr": "10.0.0.1:10911", "namespace": "ORDER_TOPIC_CONFIG", "key": "T1", "brokerId": "0",
                "topics": "T1;T2"}


@pytest.mark.parametrize("code", sorted(SUPPORTED_CODES - WRITE_CODES))
def test_a_code_declared_read_only_changes_nothing(tmp_path, code: int) -> None:
    ns = populated(tmp_path)
    before = state(ns)
    ns.clock.now += 60_000  # a read that refreshed a broker's liveness would show in its timestamp
    response = ns.call(code, READ_HEADERS, channel=BROKER)
    assert response.code in (ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND), response.remark
    assert state(ns) == before


@pytest.mark.parametrize("code", sorted(WRITE_CODES))
def test_a_code_declared_writing_is_one_a_sibling_must_apply(tmp_path, code: int) -> None:
    """Each write code changes the tables for some request: the row is not merely cautious."""
    ns = populated(tmp_path)
    if code == RequestCode.ADD_WRITE_PERM_OF_BROKER:
        ns.routes.wipe_write_perm_of_broker("broker-a")
    before = state(ns)
    ns.clock.now += 60_000
    header = {**READ_HEADERS, "value": "broker-b:8", "key": "T9"}
    body = None
    if code == RequestCode.REGISTER_BROKER:
        response = ns.register("broker-c", "10.0.0.9:10911", topics=("T7", "T8"))
    else:
        if code == RequestCode.UPDATE_NAMESRV_CONFIG:
            body = b"orderMessageEnable=true\n"
        if code == RequestCode.REGISTER_TOPIC_IN_NAMESRV:
            body = b'{"queueDatas":[{"brokerName":"broker-b","readQueueNums":2,"writeQueueNums":2,"perm":6,' \
                   b'"topicSysFlag":0}],"brokerDatas":[]}'
        if code == RequestCode.DELETE_KV_CONFIG:
            header["key"] = "T1"
        response = ns.call(code, header, body, channel=BROKER)
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert state(ns) != before


def test_the_guard_sees_exactly_the_admin_rows(tmp_path) -> None:
    """With a guard that refuses everyone, exactly the admin rows are refused."""
    ns = Namesrv(tmp_path, admin_allowed_networks="192.0.2.0/24")
    assert AdminGuard.from_settings("192.0.2.0/24", "").restricted
    refused = {code for code in SUPPORTED_CODES
               if ns.call(code, READ_HEADERS).code == ResponseCode.NO_PERMISSION}
    assert refused == ADMIN_CODES
