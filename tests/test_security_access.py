"""Admin access control (issue 8): the network allowlist, the admin token, their combination,
the locked security keys, and replays of the two UPDATE_NAMESRV_CONFIG CVE exploits.

Requests go through the real wire codec and a real processor over real tables (`Namesrv` of
test_processor); one test runs a real server to see the reactor's peer addresses.
"""
from __future__ import annotations

import logging
import os
import stat
import struct

import orjson
import pytest
from test_processor import Namesrv

from namesrv.channel import Channel
from namesrv.config import REDACTED, ConfigError, NamesrvConfig, parse_properties
from namesrv.processor import ADMIN_CODES, RESPONSE_HEADER_CODES, SUPPORTED_CODES, WRITE_CODES
from namesrv.protocol import QueueData, RemotingCommand, RequestCode, ResponseCode, TopicConfig, TopicRouteData
from namesrv.security import ADMIN_TOKEN_FIELD, AdminGuard, parse_networks, peer_ip

TOKEN = "s3cret-admin-token-0123456789"
NETWORKS = "127.0.0.1/32;10.0.0.0/8;::1/128;2001:db8:1::/48"
INSIDE = Channel("tcp", b"admin", "10.20.30.40:50000")
OUTSIDE = Channel("tcp", b"attacker", "203.0.113.7:40000")
SECURITY_KEYS = ("adminAllowedNetworks", "adminToken", "maxTopicsPerRegistration")


def admin_requests(tmp_path) -> dict[int, tuple[dict, bytes | None]]:
    """One well-formed request (ext, body) per admin code, each of which would change state (but
    EXPLAIN_ROUTE, a read guarded for what it tells: who connects from where)."""
    route = TopicRouteData(queue_datas=[QueueData("broker-a", 2, 2, 6, 0)]).encode()
    return {
        RequestCode.PUT_KV_CONFIG: ({"namespace": "NS", "key": "k", "value": "new"}, None),
        RequestCode.DELETE_KV_CONFIG: ({"namespace": "NS", "key": "k"}, None),
        RequestCode.WIPE_WRITE_PERM_OF_BROKER: ({"brokerName": "broker-a"}, None),
        RequestCode.ADD_WRITE_PERM_OF_BROKER: ({"brokerName": "broker-a"}, None),
        RequestCode.DELETE_TOPIC_IN_NAMESRV: ({"topic": "T1"}, None),
        RequestCode.REGISTER_TOPIC_IN_NAMESRV: ({"topic": "New"}, route),
        RequestCode.UPDATE_NAMESRV_CONFIG: ({}, b"orderMessageEnable=true\n"),
        RequestCode.EXPLAIN_ROUTE: ({"topic": "T1"}, None),
    }


def state(ns: Namesrv) -> tuple:
    """Everything an admin request could change."""
    tables = ns.routes.snapshot()
    return (tables.topic_queue_table, ns.kv.get_namespace("NS"), ns.config.to_properties(reveal_secrets=True),
            os.path.exists(ns.config.config_store_path))


def seeded(tmp_path, **config) -> Namesrv:
    ns = Namesrv(tmp_path, **config)
    ns.register(topics=(TopicConfig("T1", perm=7), TopicConfig("T2", perm=7)))  # ADD_WRITE_PERM rewrites 7 as 6
    ns.kv.put("NS", "k", "old")
    return ns


def test_the_admin_codes_are_issue_8s_list():
    assert ADMIN_CODES == {100, 102, 205, 327, 216, 217, 318, RequestCode.EXPLAIN_ROUTE}  # issue 33's read
    assert ADMIN_CODES <= SUPPORTED_CODES


@pytest.mark.parametrize("code", sorted(ADMIN_CODES))
def test_by_default_anyone_may_send_admin_requests_as_with_rocketmq(tmp_path, code):
    ns = seeded(tmp_path)
    ext, body = admin_requests(tmp_path)[code]
    assert ns.call(code, ext, body, channel=OUTSIDE).code == ResponseCode.SUCCESS


@pytest.mark.parametrize("code", sorted(ADMIN_CODES))
def test_a_refused_admin_request_changes_nothing(tmp_path, code):
    ns = seeded(tmp_path, admin_allowed_networks=NETWORKS)
    ext, body = admin_requests(tmp_path)[code]
    before = state(ns)
    response = ns.call(code, ext, body, channel=OUTSIDE)
    assert (response.code, response.remark) == \
        (ResponseCode.NO_PERMISSION, "admin request refused: peer 203.0.113.7 is not in adminAllowedNetworks")
    assert state(ns) == before
    if code in RESPONSE_HEADER_CODES:  # Java's typed response header: extFields present even on errors
        assert response.ext_fields == {} and b'"extFields":{}' in response.raw_header
    assert ns.call(code, ext, body, channel=INSIDE).code == ResponseCode.SUCCESS
    assert (state(ns) != before) == (code in WRITE_CODES)  # EXPLAIN_ROUTE admitted reads, changing nothing


@pytest.mark.parametrize("remote_addr, admitted", [
    ("127.0.0.1:50000", True),
    ("10.255.0.1:1", True),
    ("10.0.0.1", True),  # the reactor gives the bare IP when it cannot read the port
    ("127.0.0.2:50000", False),
    ("11.0.0.1:50000", False),
    ("[::1]:50000", True),
    ("::1:50000", True),
    ("::1", True),
    ("2001:db8:1:ffff::7:443", True),
    ("[2001:db8:2::7]:443", False),
    ("::ffff:10.1.2.3:50000", True),  # IPv4-mapped (dual-stack socket): matched as IPv4
    ("::ffff:192.0.2.1:50000", False),
    ("fe80::1%eth0:50000", False),
])
def test_the_allowlist_matches_the_peer_address(tmp_path, remote_addr, admitted):
    ns = seeded(tmp_path, admin_allowed_networks=NETWORKS)
    response = ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v"},
                       channel=Channel("tcp", b"peer", remote_addr))
    if admitted:
        assert response.code == ResponseCode.SUCCESS, response.remark
    else:
        assert response.code == ResponseCode.NO_PERMISSION
        assert response.remark.endswith("is not in adminAllowedNetworks")


@pytest.mark.parametrize("remote_addr", ["", "unknown", "host.example:80", "999.1.1.1:80"])
def test_an_unreadable_peer_address_is_refused_by_the_allowlist(tmp_path, remote_addr):
    ns = seeded(tmp_path, admin_allowed_networks="0.0.0.0/0;::/0")
    response = ns.call(RequestCode.DELETE_KV_CONFIG, {"namespace": "NS", "key": "k"},
                       channel=Channel("zmq", b"peer", remote_addr))
    assert (response.code, response.remark) == (
        ResponseCode.NO_PERMISSION, "admin request refused: peer address unknown, adminAllowedNetworks cannot admit it")
    assert ns.kv.get("NS", "k") == "old"


def test_non_admin_requests_are_never_restricted(tmp_path):
    ns = seeded(tmp_path, admin_allowed_networks=NETWORKS, admin_token=TOKEN)
    assert ns.register(channel=OUTSIDE).code == ResponseCode.SUCCESS
    for code, ext in ((RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}),
                      (RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k"}),
                      (RequestCode.GET_BROKER_CLUSTER_INFO, None), (RequestCode.GET_NAMESRV_CONFIG, None),
                      (RequestCode.UNREGISTER_BROKER, {"brokerName": "broker-a", "brokerAddr": "10.0.0.1:10911",
                                                       "clusterName": "C", "brokerId": "0"})):
        assert ns.call(code, ext, channel=OUTSIDE).code == ResponseCode.SUCCESS


@pytest.mark.parametrize("offered, remark", [
    (None, "admin request refused: extFields adminToken is missing"),
    ("", "admin request refused: extFields adminToken is missing"),  # binary header: empty is absent
    ("wrong-token-of-some-length", "admin request refused: extFields adminToken does not match"),
    (TOKEN[:-1], "admin request refused: extFields adminToken does not match"),
    (TOKEN + "x", "admin request refused: extFields adminToken does not match"),
    (TOKEN.upper(), "admin request refused: extFields adminToken does not match"),
    ("ünïcödé-token-😀-0123456789", "admin request refused: extFields adminToken does not match"),
])
def test_the_token_must_match_exactly(tmp_path, caplog, offered, remark):
    ns = seeded(tmp_path, admin_token=TOKEN)
    ext = {"namespace": "NS", "key": "k", "value": "new", ADMIN_TOKEN_FIELD: offered}
    with caplog.at_level(logging.INFO, logger="namesrv"):
        response = ns.call(RequestCode.PUT_KV_CONFIG, ext, channel=OUTSIDE, serialize_type=1)
    assert (response.code, response.remark) == (ResponseCode.NO_PERMISSION, remark)
    assert ns.kv.get("NS", "k") == "old"
    assert TOKEN not in caplog.text and (not offered or offered not in caplog.text)
    assert response.ext_fields is None


def test_the_right_token_is_admitted_and_logged_without_it(tmp_path, caplog):
    ns = seeded(tmp_path, admin_token=TOKEN)
    with caplog.at_level(logging.INFO, logger="namesrv"):
        response = ns.call(RequestCode.PUT_KV_CONFIG,
                           {"namespace": "NS", "key": "k", "value": "new", ADMIN_TOKEN_FIELD: TOKEN}, channel=OUTSIDE)
    assert response.code == ResponseCode.SUCCESS and ns.kv.get("NS", "k") == "new"
    assert "admin request code 100 from tcp:203.0.113.7:40000 admitted" in caplog.text
    assert TOKEN not in caplog.text


def test_a_refusal_is_logged_as_a_warning_with_peer_and_code(tmp_path, caplog):
    ns = seeded(tmp_path, admin_allowed_networks=NETWORKS)
    with caplog.at_level(logging.WARNING, logger="namesrv"):
        ns.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}, channel=OUTSIDE)
    [record] = [r for r in caplog.records if "refused" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == ("admin request code 205 from tcp:203.0.113.7:40000 refused: "
                                   "admin request refused: peer 203.0.113.7 is not in adminAllowedNetworks")


@pytest.mark.parametrize("channel, token, remark", [
    (INSIDE, TOKEN, None),
    (INSIDE, "wrong-token-of-some-length", "admin request refused: extFields adminToken does not match"),
    (INSIDE, None, "admin request refused: extFields adminToken is missing"),
    (OUTSIDE, TOKEN, "admin request refused: peer 203.0.113.7 is not in adminAllowedNetworks"),
    (OUTSIDE, "wrong-token-of-some-length", "admin request refused: peer 203.0.113.7 is not in adminAllowedNetworks"),
])
def test_with_both_rules_a_request_must_pass_both(tmp_path, channel, token, remark):
    ns = seeded(tmp_path, admin_allowed_networks=NETWORKS, admin_token=TOKEN)
    response = ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T1", ADMIN_TOKEN_FIELD: token}, channel=channel)
    if remark is None:
        assert response.code == ResponseCode.SUCCESS and "T1" not in ns.routes.snapshot().topic_queue_table
    else:
        assert (response.code, response.remark) == (ResponseCode.NO_PERMISSION, remark)
        assert "T1" in ns.routes.snapshot().topic_queue_table


def test_the_guard_alone_is_sans_io_and_reports_restriction():
    assert not AdminGuard().restricted and AdminGuard().refusal(None, "") is None
    guard = AdminGuard(parse_networks("192.0.2.0/24"), TOKEN)
    assert guard.restricted
    assert guard.refusal({ADMIN_TOKEN_FIELD: TOKEN}, "192.0.2.9:1") is None
    assert peer_ip("[::ffff:192.0.2.9]:1") == peer_ip("192.0.2.9") and peer_ip("nope") is None


# ---------------------------------------------------------------- configuration of the guard


@pytest.mark.parametrize("key, value, message", [
    ("adminAllowedNetworks", "10.0.0.1/8", "adminAllowedNetworks: '10.0.0.1/8' is not a network: "
                                            "10.0.0.1/8 has host bits set"),
    ("adminAllowedNetworks", "127.0.0.1/32;intranet", "adminAllowedNetworks: 'intranet' is not a network: "
                                                       "'intranet' does not appear to be an IPv4 or IPv6 network"),
    ("adminAllowedNetworks", "10.0.0.0/33", "adminAllowedNetworks: '10.0.0.0/33' is not a network: "
                                             "'10.0.0.0/33' does not appear to be an IPv4 or IPv6 network"),
    ("adminToken", "short", "adminToken: too short: use at least 16 characters (e.g. `openssl rand -hex 32`)"),
    ("adminToken", REDACTED, "adminToken: too short: use at least 16 characters (e.g. `openssl rand -hex 32`)"),
    ("maxTopicsPerRegistration", "-1", "maxTopicsPerRegistration: must not be negative, got -1"),
    ("maxTopicsPerRegistration", "lots", "maxTopicsPerRegistration: expected an integer, got 'lots'"),
])
def test_bad_security_values_are_config_errors_naming_the_key(key, value, message):
    with pytest.raises(ConfigError) as error:
        NamesrvConfig.load(None, {key: value})
    assert (error.value.key, str(error.value)) == (key, message)


def test_good_security_values_load():
    config = NamesrvConfig.load(None, {"adminAllowedNetworks": " 127.0.0.1/32 ; ::1 ;; 10.0.0.0/8 ",
                                       "adminToken": TOKEN, "maxTopicsPerRegistration": "0"})
    assert [str(n) for n in parse_networks(config.admin_allowed_networks)] == ["127.0.0.1/32", "::1/128", "10.0.0.0/8"]
    assert (config.admin_token, config.max_topics_per_registration) == (TOKEN, 0)
    defaults = NamesrvConfig()
    assert (defaults.admin_allowed_networks, defaults.admin_token, defaults.max_topics_per_registration) == \
        ("", "", 200000)


def test_security_keys_are_locked_and_never_remotely_updatable():
    config = NamesrvConfig(config_black_list="")
    assert set(SECURITY_KEYS) <= config.black_list()
    assert not set(SECURITY_KEYS) & NamesrvConfig.remote_updatable()
    assert not config.black_list() & NamesrvConfig.remote_updatable()
    for key in NamesrvConfig.keys():  # no path, port, address or home can be changed remotely
        if key.endswith(("Path", "Port", "Address", "Home", "Networks", "Token")):
            assert key not in NamesrvConfig.remote_updatable(), key


@pytest.mark.parametrize("body", [
    b"adminAllowedNetworks=0.0.0.0/0\n",
    b"adminAllowedNetworks=\n",
    b"adminToken=\n",
    b"adminToken=attacker-chosen-token-123\n",
    b"maxTopicsPerRegistration=0\n",
    b"configBlackList=\nadminToken=\n",
    b"orderMessageEnable=true\nadminAllowedNetworks=\n",
])
def test_update_namesrv_config_cannot_touch_the_security_keys(tmp_path, body):
    ns = Namesrv(tmp_path, config_black_list="", admin_token=TOKEN, admin_allowed_networks=NETWORKS)
    before = ns.config.to_properties(reveal_secrets=True)
    response = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, {ADMIN_TOKEN_FIELD: TOKEN}, body, channel=INSIDE)
    assert (response.code, response.remark) == (ResponseCode.NO_PERMISSION, "Can not update config in black list.")
    assert ns.config.to_properties(reveal_secrets=True) == before and not os.path.exists(ns.config.config_store_path)


def test_get_namesrv_config_redacts_the_token(tmp_path):
    ns = Namesrv(tmp_path, admin_token=TOKEN, admin_allowed_networks=NETWORKS)
    response = ns.call(RequestCode.GET_NAMESRV_CONFIG, channel=OUTSIDE)
    shown = parse_properties(response.body.decode())
    assert shown["adminToken"] == REDACTED and TOKEN.encode() not in response.body
    assert shown["adminAllowedNetworks"] == NETWORKS and shown["maxTopicsPerRegistration"] == "200000"
    assert parse_properties(Namesrv(tmp_path).call(RequestCode.GET_NAMESRV_CONFIG).body.decode())["adminToken"] == ""


def test_a_persisted_config_keeps_the_operators_token_line_and_permissions(tmp_path):
    """An update rewrites only its own keys: the operator's token stays in the file (a restart stays
    guarded), the file keeps the owner-only mode it was given, and a token given on the command
    line is never written anywhere."""
    ns = Namesrv(tmp_path, admin_token=TOKEN)
    store = ns.config.config_store_path
    with open(store, "w", encoding="utf-8") as file:
        file.write(f"adminToken={TOKEN}\n")
    os.chmod(store, 0o600)
    response = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, {ADMIN_TOKEN_FIELD: TOKEN}, b"enableTopicList=false\n")
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert open(store, encoding="utf-8").read() == f"adminToken={TOKEN}\nenableTopicList=false\n"
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o600
    os.chmod(store, 0o400)  # an operator's tighter choice survives the next rewrite
    assert ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, {ADMIN_TOKEN_FIELD: TOKEN}, b"enableTopicList=true\n").code == 0
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o400
    assert parse_properties(open(store, encoding="utf-8").read())["enableTopicList"] == "true"

    overridden = Namesrv(tmp_path / "other", admin_token=TOKEN)  # the token from the command line only
    assert overridden.call(RequestCode.UPDATE_NAMESRV_CONFIG, {ADMIN_TOKEN_FIELD: TOKEN},
                           b"enableTopicList=false\n").code == 0
    assert TOKEN not in open(overridden.config.config_store_path, encoding="utf-8").read()


# ---------------------------------------------------------------- replays of the public exploits


def exploit_frame(header: bytes, body: bytes) -> RemotingCommand:
    """The frame a public PoC writes to port 9876 (JSON header, serialize type 0), as the server decodes it."""
    frame = struct.pack(">I", len(header)) + header + body
    return RemotingCommand.decode(frame)


def cve_requests(tmp_path) -> dict[str, RemotingCommand]:
    target = tmp_path / "pwned"
    return {
        # CVE-2023-37582: point configStorePath anywhere; the persisted config is written there.
        "CVE-2023-37582": exploit_frame(
            b'{"code":318,"flag":0,"language":"JAVA","opaque":0,"serializeTypeCurrentRPC":"JSON","version":405}',
            f"configStorePath={target}\nproductEnvName=test7".encode()),
        "CVE-2023-37582 (kvConfigPath variant)": exploit_frame(
            b'{"code":318,"extFields":{"test":"RockedtMQ"},"flag":0,"language":"JAVA","opaque":266,'
            b'"serializeTypeCurrentRPC":"JSON","version":433}',
            f"brokerConfigPath={target}.a\nconfigStorePath={target}\nkvConfigPath=123\\nMy name is x".encode()),
        # CVE-2023-33246: rocketmqHome becomes a shell command; the NameServer variant of the broker exploit.
        "CVE-2023-33246": exploit_frame(
            b'{"code":318,"flag":0,"language":"JAVA","opaque":0,"serializeTypeCurrentRPC":"JSON","version":395}',
            f"filterServerNums=1\nrocketmqHome=-c $@|sh . echo touch {target};\n".encode()),
        # ... and the broker exploit itself (UPDATE_BROKER_CONFIG, code 25) sent to the NameServer.
        "CVE-2023-33246 (broker code 25)": exploit_frame(
            b'{"code":25,"flag":0,"language":"JAVA","opaque":0,"serializeTypeCurrentRPC":"JSON","version":395}',
            f"filterServerNums=1\nrocketmqHome=-c $@|sh . echo touch {target};\n".encode()),
    }


@pytest.mark.parametrize("name", ["CVE-2023-37582", "CVE-2023-37582 (kvConfigPath variant)", "CVE-2023-33246",
                                  "CVE-2023-33246 (broker code 25)"])
@pytest.mark.parametrize("guarded", [False, True])
def test_cve_exploit_replays_are_refused_and_write_nothing(tmp_path, name, guarded):
    config = {"admin_allowed_networks": NETWORKS} if guarded else {}
    ns = Namesrv(tmp_path, **config)
    request = cve_requests(tmp_path)[name]
    before = ns.config.to_properties()
    response = ns.processor.process(request, OUTSIDE)
    assert response.opaque == request.opaque and response.is_response
    if request.code == 25:
        assert (response.code, response.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                                    " request type 25 not supported")
    elif guarded:
        assert (response.code, response.remark) == \
            (ResponseCode.NO_PERMISSION, "admin request refused: peer 203.0.113.7 is not in adminAllowedNetworks")
    else:
        assert (response.code, response.remark) == (ResponseCode.NO_PERMISSION, "Can not update config in black list.")
    assert ns.config.to_properties() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no config store, no target, no KV file


# ---------------------------------------------------------------- through a real server


def test_a_real_server_checks_the_reactors_peer_address_and_the_token(namesrv_factory, raw_connect):
    outside_only = namesrv_factory(adminAllowedNetworks="192.0.2.0/24")
    with_token = namesrv_factory(adminAllowedNetworks="127.0.0.0/8;::1", adminToken=TOKEN)
    put = {"namespace": "NS", "key": "k", "value": "v"}
    conn = raw_connect(outside_only.address)
    refused = conn.call(conn.request(RequestCode.PUT_KV_CONFIG, put))
    assert (refused.code, refused.remark) == \
        (ResponseCode.NO_PERMISSION, "admin request refused: peer 127.0.0.1 is not in adminAllowedNetworks")
    assert conn.call(conn.request(RequestCode.GET_KV_CONFIG, put)).code == ResponseCode.QUERY_NOT_FOUND
    conn = raw_connect(with_token.address)
    missing = conn.call(conn.request(RequestCode.PUT_KV_CONFIG, put))
    assert missing.remark == "admin request refused: extFields adminToken is missing"
    assert conn.call(conn.request(RequestCode.PUT_KV_CONFIG, put | {ADMIN_TOKEN_FIELD: TOKEN})).code == 0
    shown = conn.call(conn.request(RequestCode.GET_NAMESRV_CONFIG))
    assert parse_properties(shown.body.decode())["adminToken"] == REDACTED
    assert orjson.loads(conn.call(conn.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"})).body) == \
        {"table": {"k": "v"}}
