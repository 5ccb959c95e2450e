"""CURVE on the ZeroMQ endpoint, against a real namesrv process: a client whose public key is in the
allowlist is served (raw DEALER and namesrv.client alike); a client with an unknown key, or without
CURVE, gets nothing while the others keep being served; half or bad key configuration refuses to start."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import zmq
import zmq.auth

from namesrv.client import CurveClientKeys, RemotingClient
from namesrv.launcher import NamesrvProcess, NamesrvStartError
from namesrv.protocol import RemotingCommand, RequestCode, ResponseCode
from namesrv.protocol.msgpack_codec import decode_msgpack, encode_msgpack


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Key files: the server's pair, an allowed client's and a stranger's; `allowed` holds the client's public key."""
    root = tmp_path_factory.mktemp("curve")
    allowed = root / "allowed"
    allowed.mkdir()
    server_public, server_secret = zmq.auth.create_certificates(root, "server")
    zmq.auth.create_certificates(allowed, "client")
    client_secret = allowed / "client.key_secret"
    client_secret.rename(root / "client.key_secret")  # the allowlist directory holds public keys only
    _, stranger_secret = zmq.auth.create_certificates(root, "stranger")
    return {"server_public": Path(server_public), "server_secret": Path(server_secret), "allowed": allowed,
            "client_secret": root / "client.key_secret", "stranger_secret": Path(stranger_secret)}


@pytest.fixture
def namesrv(namesrv_factory, keys):
    return namesrv_factory(zmqCurveSecretKeyFile=keys["server_secret"], zmqCurveAllowedClientsDir=keys["allowed"])


def dealer(zmq_context: zmq.Context, endpoint: str, curve: CurveClientKeys | None) -> zmq.Socket:
    sock = zmq_context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        curve.apply(sock)
    sock.connect(endpoint)
    return sock


def ask(sock: zmq.Socket, timeout: float) -> RemotingCommand | None:
    """GET_BROKER_CLUSTER_INFO; the answer, or None if nothing came within `timeout` seconds."""
    request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=7)
    sock.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
    try:
        sock.send_multipart([encode_msgpack(request)])
    except zmq.Again:  # no connection to queue it on: the server refused the handshake before the send
        return None
    if not sock.poll(int(timeout * 1000)):
        return None
    (frame,) = sock.recv_multipart()
    return decode_msgpack(frame)


def test_an_allowed_client_is_served(namesrv, keys, zmq_context) -> None:
    allowed = CurveClientKeys.from_files(keys["client_secret"], keys["server_public"])
    answer = ask(dealer(zmq_context, namesrv.zmq_address, allowed), 5)
    assert answer is not None and answer.code == ResponseCode.SUCCESS and answer.opaque == 7
    namesrv.wait_for_log(r"zmq endpoint: CURVE on, 1 client keys allowed")


def test_the_namesrv_client_speaks_curve(namesrv, keys) -> None:
    curve = CurveClientKeys.from_files(keys["client_secret"], keys["server_public"])
    with RemotingClient(transport="zmq", zmq_curve=curve, timeout=5) as client:
        answer = client.invoke(namesrv.zmq_address, client.request(RequestCode.GET_BROKER_CLUSTER_INFO))
    assert answer.code == ResponseCode.SUCCESS


@pytest.mark.parametrize("who", ["unknown key", "no CURVE", "wrong server key"])
def test_a_refused_client_gets_nothing_and_others_keep_being_served(namesrv, keys, zmq_context, who) -> None:
    allowed_keys = CurveClientKeys.from_files(keys["client_secret"], keys["server_public"])
    allowed = dealer(zmq_context, namesrv.zmq_address, allowed_keys)
    assert ask(allowed, 5).code == ResponseCode.SUCCESS
    refused_keys = {
        "unknown key": CurveClientKeys.from_files(keys["stranger_secret"], keys["server_public"]),
        "no CURVE": None,
        "wrong server key": CurveClientKeys(allowed_keys.public_key, allowed_keys.secret_key,
                                            zmq.curve_keypair()[0]),
    }[who]
    refused = dealer(zmq_context, namesrv.zmq_address, refused_keys)
    assert ask(refused, 1.5) is None
    if who == "unknown key":
        namesrv.wait_for_log(r"WARNING .*refused a zmq CURVE client with unknown public key "
                             + re.escape(zmq.auth.load_certificate(keys["stranger_secret"])[0].decode()))
    assert ask(allowed, 5).code == ResponseCode.SUCCESS
    assert ask(dealer(zmq_context, namesrv.zmq_address, allowed_keys), 5).code == ResponseCode.SUCCESS


def test_curve_is_off_by_default(namesrv_factory, zmq_context) -> None:
    namesrv = namesrv_factory()
    assert ask(dealer(zmq_context, namesrv.zmq_address, None), 5).code == ResponseCode.SUCCESS
    assert "CURVE" not in namesrv.log_text()


@pytest.mark.parametrize("settings, complaint", [
    ({"zmqCurveSecretKeyFile": "server_secret"}, r"zmqCurveAllowedClientsDir: CURVE needs both"),
    ({"zmqCurveAllowedClientsDir": "allowed"}, r"zmqCurveSecretKeyFile: CURVE needs both"),
    ({"zmqCurveSecretKeyFile": "server_public", "zmqCurveAllowedClientsDir": "allowed"},
     r"zmqCurveSecretKeyFile: .*server\.key holds no secret key"),
    ({"zmqCurveSecretKeyFile": "missing", "zmqCurveAllowedClientsDir": "allowed"},
     r"zmqCurveSecretKeyFile: cannot read a key pair"),
    ({"zmqCurveSecretKeyFile": "server_secret", "zmqCurveAllowedClientsDir": "empty"},
     r"zmqCurveAllowedClientsDir: no client public key files"),
])
def test_half_or_bad_key_configuration_refuses_to_start(keys, tmp_path, settings, complaint) -> None:
    paths = {**keys, "missing": tmp_path / "nothing.key_secret", "empty": tmp_path}
    overrides = {key: paths[name] for key, name in settings.items()}
    server = NamesrvProcess(overrides, workdir=tmp_path / "work")
    try:
        with pytest.raises(NamesrvStartError, match=complaint):
            server.start()
        assert server.returncode == 2
    finally:
        server.close()
