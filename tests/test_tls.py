"""TLS on the RocketMQ port: the sans-IO session, the settings, and real servers in the three modes,
with certificate reload, client certificates, the handshake timeout, namesrv's own clients, and the
real Java 4.9.8 broker and producer/consumer (`-Dtls.enable=true`)."""
from __future__ import annotations

import datetime
import json
import os
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from namesrv.client import NamesrvClient, RemotingConnectError, client_tls_context
from namesrv.config import NamesrvConfig
from namesrv.protocol import FrameDecoder, RemotingCommand
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.remoting.endpoints import TLS_HANDSHAKE_BYTES
from namesrv.remoting.tls import TlsConfigError, TlsServer, TlsSession, TlsSettings, server_context
from test_operator_http import RMQ, closed_by_server, free_broker_port, java_reference_skip_reason, scrape


def call(sock: socket.socket, code: int, ext: dict[str, str] | None = None, opaque: int = 1) -> RemotingCommand:
    """One request on a blocking socket (plain or TLS); the first frame back, decoded."""
    sock.sendall(RemotingCommand.request(code, ext, opaque=opaque).encode())
    decoder = FrameDecoder()
    frames: list[bytes] = []
    while not frames:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed by the server")
        frames = decoder.feed(chunk)
    return RemotingCommand.decode(frames[0])


# ---- certificates
def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_cert(folder: Path, stem: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None,
              ca: bool = False, key: ec.EllipticCurvePrivateKey | None = None,
              ) -> tuple[Path, Path, x509.Certificate, ec.EllipticCurvePrivateKey]:
    """(cert.pem, key.pem, cert, key): self-signed, or signed by `issuer`; for `key`, else a new one."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    issuer_cert, issuer_key = issuer if issuer is not None else (None, key)
    builder = (x509.CertificateBuilder().subject_name(_name(stem))
               .issuer_name(issuer_cert.subject if issuer_cert is not None else _name(stem))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                                        critical=True)
    cert = builder.sign(issuer_key, hashes.SHA256())
    cert_path, key_path = folder / f"{stem}.crt", folder / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path, cert, key


def any_server() -> ssl.SSLContext:
    return client_tls_context()


# ---- the session, driven directly
def pump(client: ssl.SSLObject, client_in: ssl.MemoryBIO, client_out: ssl.MemoryBIO, session: TlsSession) -> bytes:
    """Run the handshake between a client SSLObject and a session; the plaintext the session received."""
    plain = b""
    for _ in range(10):
        try:
            client.do_handshake()
            done = True
        except ssl.SSLWantReadError:
            done = False
        received, records = session.receive(client_out.read())
        plain += received
        client_in.write(records)
        if done and session.established:
            return plain
    raise AssertionError("the handshake did not finish")


def test_a_session_carries_frames_both_ways_and_refuses_garbage() -> None:
    context = server_context(TlsSettings(True, "none", "", "", "", False, ""))
    session = TlsSession(context)
    client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = any_server().wrap_bio(client_in, client_out, server_hostname="localhost")
    assert pump(client, client_in, client_out, session) == b""
    assert session.established and session.version in ("TLSv1.2", "TLSv1.3")
    frame = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, opaque=5).encode()
    client.write(frame * 3)
    wire = client_out.read()
    plain, _ = session.receive(wire[:7])  # a record split anywhere: held until whole
    assert plain == b""
    plain, _ = session.receive(wire[7:])
    assert plain == frame * 3
    client_in.write(session.encrypt([b"reply-1", b"reply-2"]))
    assert client.read(100) == b"reply-1reply-2"
    try:
        client.unwrap()  # close_notify
    except ssl.SSLWantReadError:
        pass
    with pytest.raises(ssl.SSLZeroReturnError):  # not b"" forever: the reactor would spin on it
        session.receive(client_out.read())
    with pytest.raises(ssl.SSLError):
        TlsSession(context).receive(b"\x16\x03\x01\x00\x05hello")


def test_settings_from_the_tls_config_file_override_the_keys_as_rocketmq(tmp_path) -> None:
    cert, key, _, _ = make_cert(tmp_path, "server")
    properties = tmp_path / "tls.properties"
    properties.write_text(f"tls.test.mode.enable=false\ntls.server.certPath={cert}\ntls.server.keyPath={key}\n"
                          "tls.client.keyPath=/ignored/by/a/server\n")
    config = NamesrvConfig(tls_config_file=str(properties), tls_server_cert_path="/overridden")
    settings = TlsSettings.read(config)
    assert (settings.test_mode, settings.cert_path, settings.key_path) == (False, str(cert), str(key))
    assert not settings.self_signed
    server_context(settings)


@pytest.mark.parametrize("overrides, needle", [
    ({"tls_test_mode_enable": False}, "required when tlsTestModeEnable is false"),
    ({"tls_server_cert_path": "/nonexistent.crt", "tls_server_key_path": "/nonexistent.key"}, "cannot load"),
    ({"tls_server_need_client_auth": "require"}, "authenticates no one"),
])
def test_settings_a_server_cannot_use_are_refused_naming_why(tmp_path, overrides, needle) -> None:
    if overrides.get("tls_server_need_client_auth"):
        cert, key, _, _ = make_cert(tmp_path, "server")
        overrides = {**overrides, "tls_server_cert_path": str(cert), "tls_server_key_path": str(key)}
    config = NamesrvConfig(tls_config_file="", **overrides)
    with pytest.raises(TlsConfigError, match=needle):
        TlsServer(config)


def test_a_changed_certificate_is_reloaded_and_a_half_rotated_pair_keeps_the_old(tmp_path, caplog) -> None:
    cert, key, _, _ = make_cert(tmp_path, "server")
    config = NamesrvConfig(tls_config_file="", tls_test_mode_enable=False, tls_server_cert_path=str(cert),
                           tls_server_key_path=str(key))
    tls = TlsServer(config)
    old = tls.context
    assert not tls.reload_if_changed()
    other = tmp_path / "next"
    other.mkdir()
    new_cert, new_key, _, _ = make_cert(other, "server")
    cert.write_bytes(new_cert.read_bytes())  # the certificate first: it does not match the old key yet
    assert not tls.reload_if_changed() and tls.context is old
    assert "cannot be used yet" in caplog.text
    key.write_bytes(new_key.read_bytes())
    assert tls.reload_if_changed() and tls.context is not old and tls.loads == 2
    renewed = tmp_path / "renewed"
    renewed.mkdir()
    # a certificate renewed on the same key: RocketMQ 5.x waits for the key to change too; reloaded here
    renewed_cert, _, _, _ = make_cert(renewed, "renewed", key=serialization.load_pem_private_key(key.read_bytes(), None))
    cert.write_bytes(renewed_cert.read_bytes())
    assert tls.reload_if_changed() and tls.loads == 3


# ---- real servers
def tls_socket(address: str, context: ssl.SSLContext | None = None) -> ssl.SSLSocket:
    host, port = address.rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=5)
    return (context or any_server()).wrap_socket(raw, server_hostname=host)


def closed(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(100) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


def test_permissive_mode_serves_tls_and_plain_connections_on_one_port(namesrv_factory) -> None:
    server = namesrv_factory()  # RocketMQ's defaults: permissive, a self-signed certificate
    server.wait_for_log(r"TLS permissive with a self-signed certificate")
    with tls_socket(server.address) as secure:
        assert call(secure, RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS
        assert call(secure, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "none"}, 2).code == ResponseCode.TOPIC_NOT_EXIST
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as plain:
        assert call(plain, RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS
        with tls_socket(server.address) as secure:
            secure.unwrap().close()  # a clean TLS close: the server must go on serving
        started = time.monotonic()
        assert call(plain, RequestCode.GET_BROKER_CLUSTER_INFO, opaque=2).code == ResponseCode.SUCCESS
        assert time.monotonic() - started < 1
    samples = scrape(server)
    assert samples['namesrv_tls_handshakes_total{result="done"}'] == 2
    assert samples["namesrv_tls_context_loads_total"] == 1


def test_enforcing_mode_closes_a_plain_connection_saying_why(namesrv_factory) -> None:
    server = namesrv_factory(tlsMode="enforcing")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as plain:
        plain.sendall(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=1).encode())
        assert closed(plain)
    server.wait_for_log(r"WARNING .*a plain \(non-TLS\) connection while tlsMode is enforcing")
    with tls_socket(server.address) as secure:
        assert call(secure, RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS


def test_disabled_mode_refuses_a_tls_handshake_and_serves_plain(namesrv_factory) -> None:
    server = namesrv_factory(tlsMode="disabled")
    server.wait_for_log(r"boot success.*\(TLS disabled\)")
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        tls_socket(server.address).close()
    server.wait_for_log(r"a TLS handshake while tlsMode is disabled")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as plain:
        assert call(plain, RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS


def test_a_stalled_handshake_is_closed_after_the_timeout(namesrv_factory) -> None:
    server = namesrv_factory(tlsHandshakeTimeoutSeconds=1)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as stalled:
        stalled.sendall(b"\x16\x03\x01\x02\x00")  # a ClientHello record header, then nothing
        started = time.monotonic()
        assert closed(stalled)
        assert 0.9 < time.monotonic() - started < 4
    assert scrape(server)['namesrv_tls_handshakes_total{result="timed_out"}'] == 1


def test_stalled_handshakes_count_in_the_budget_and_the_oldest_are_closed_past_it(namesrv_factory) -> None:
    server = namesrv_factory(maxInFlightRequestBytes=16 << 20, maxFrameLength=1 << 20)
    room = (16 << 20) // TLS_HANDSHAKE_BYTES  # stalled handshakes the budget holds
    stalled = []
    try:
        for opened in range(room + 40):
            if opened == 40:  # the first 40 are the server's oldest too: ZeroMQ reads pending peers in no set order
                deadline = time.monotonic() + 10
                while scrape(server)['namesrv_in_flight_bytes{kind="incomplete"}'] < 40 * TLS_HANDSHAKE_BYTES:
                    assert time.monotonic() < deadline, "the server did not take the first 40 handshakes"
                    time.sleep(0.05)
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            sock.sendall(b"\x16\x03\x01\x02\x00")  # a ClientHello record header, then nothing
            stalled.append(sock)
        time.sleep(0.5)
        counted = scrape(server)['namesrv_in_flight_bytes{kind="incomplete"}']
        assert room * TLS_HANDSHAKE_BYTES * 0.9 < counted <= 16 << 20
        with tls_socket(server.address) as secure:  # a whole request still gets in, and is answered
            assert call(secure, RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS
        assert all(closed(sock) for sock in stalled[:40])  # the oldest made room
        assert not any(closed_by_server(sock, 0.01) for sock in stalled[-10:])
    finally:
        for sock in stalled:
            sock.close()
    assert scrape(server)["namesrv_in_flight_connections_closed_total"] >= 40
    deadline = time.monotonic() + 5
    while scrape(server)['namesrv_in_flight_bytes{kind="incomplete"}'] >= TLS_HANDSHAKE_BYTES:
        assert time.monotonic() < deadline, "the closed handshakes are still counted"
        time.sleep(0.1)


def test_configured_certificates_client_authentication_and_reload_end_to_end(namesrv_factory, tmp_path) -> None:
    ca_cert, _, ca, ca_key = make_cert(tmp_path, "ca", ca=True)
    cert, key, _, _ = make_cert(tmp_path, "server", (ca, ca_key))
    client_cert, client_key, _, _ = make_cert(tmp_path, "client", (ca, ca_key))
    server = namesrv_factory(tlsMode="enforcing", tlsTestModeEnable="false", tlsServerCertPath=cert,
                             tlsServerKeyPath=key, tlsServerNeedClientAuth="require", tlsServerAuthClient="true",
                             tlsServerTrustCertPath=ca_cert)
    server.wait_for_log(rf"TLS enforcing with certificate {cert}")
    verified = client_tls_context(str(ca_cert), str(client_cert), str(client_key))
    with tls_socket(server.address, verified) as secure:
        assert call(secure, RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS
        served = x509.load_der_x509_certificate(secure.getpeercert(binary_form=True))
        assert served.subject == _name("server")
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):  # no client certificate: refused
            anonymous = tls_socket(server.address, client_tls_context(str(ca_cert)))
            call(anonymous, RequestCode.GET_BROKER_CLUSTER_INFO)
        rotated = tmp_path / "rotated"
        rotated.mkdir()
        new_cert, new_key, _, _ = make_cert(rotated, "server-2", (ca, ca_key))
        key.write_bytes(new_key.read_bytes())
        cert.write_bytes(new_cert.read_bytes())
        server.wait_for_log(r"TLS files changed: new connections get certificate")
        with tls_socket(server.address, verified) as fresh:
            assert x509.load_der_x509_certificate(fresh.getpeercert(binary_form=True)).subject == _name("server-2")
        assert call(secure, RequestCode.GET_BROKER_CLUSTER_INFO, opaque=3).code == ResponseCode.SUCCESS
    assert scrape(server)["namesrv_tls_context_loads_total"] == 2


def test_namesrv_client_and_admin_speak_tls(namesrv_factory, tmp_path) -> None:
    """Against an enforcing server: the client writes a KV entry over TLS, a plain client is refused,
    and namesrv-admin --tls reads the entry back over a connection the server counts as a TLS handshake."""
    server = namesrv_factory(tlsMode="enforcing")
    with NamesrvClient(server.address, tls=client_tls_context(), timeout=5) as client:
        assert client.get_cluster_info().broker_addr_table == {}
        assert [result.ok for result in client.put_kv_config("NS", "k", "written over TLS")] == [True]
    with NamesrvClient(server.address, timeout=2, connect_timeout=2) as plain:
        with pytest.raises(RemotingConnectError):
            plain.get_cluster_info()
    handshakes = scrape(server)['namesrv_tls_handshakes_total{result="done"}']
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    admin = subprocess.run([os.sys.executable, "-m", "namesrv.admin", "getKvConfig", "-n", server.address, "-s", "NS",
                            "-k", "k", "--tls", "--json"], capture_output=True, text=True, timeout=60, env=env)
    assert admin.returncode == 0, admin.stderr
    assert json.loads(admin.stdout) == {"namespace": "NS", "key": "k", "value": "written over TLS"}
    assert scrape(server)['namesrv_tls_handshakes_total{result="done"}'] == handshakes + 1


# ---- the real Java broker and producer/consumer
@pytest.mark.skipif(java_reference_skip_reason() is not None, reason=str(java_reference_skip_reason()))
@pytest.mark.parametrize("mode", ["permissive", "enforcing"])
def test_java_broker_and_clients_with_tls_enable(namesrv_factory, tmp_path, mode) -> None:
    """A real broker 4.9.8 and producer/consumer with -Dtls.enable=true (their test mode trusts any
    certificate) register, send and receive through namesrv over TLS; a plain Java client is served in
    permissive mode and refused, with a log line saying why, in enforcing mode."""
    server = namesrv_factory(tlsMode=mode)
    run = tmp_path / "rmq"
    plain_env = {k: v for k, v in os.environ.items() if k not in ("NAMESRV_ADDR", "ROCKETMQ_REF_JAVA_OPTS")}
    plain_env["ROCKETMQ_REF_RUN"] = str(run)
    tls_env = {**plain_env, "ROCKETMQ_REF_JAVA_OPTS": "-Dtls.enable=true"}
    port = free_broker_port()
    broker = f"broker-tls-{mode}"

    def produce_consume(env: dict, topic: str) -> dict:
        result = subprocess.run([RMQ / "bin" / "produce-consume", server.address, topic, "5", "15"], env=env,
                                capture_output=True, text=True, timeout=120)
        return json.loads(result.stdout.strip().splitlines()[-1])

    subprocess.run([RMQ / "bin" / "broker", server.address, str(port), broker], env=tls_env, check=True,
                   capture_output=True, text=True, timeout=120)
    try:
        assert "register broker" in (run / broker / "logs" / "rocketmqlogs" / "broker.log").read_text()
        secure = produce_consume(tls_env, f"TlsTopic{mode}")
        assert (secure["sent"], secure["received"], secure["send_errors"]) == (5, 5, 0), secure
        assert scrape(server)['namesrv_tls_handshakes_total{result="done"}'] >= 2  # the broker and the client
        plain = produce_consume(plain_env, f"PlainTopic{mode}")
        if mode == "permissive":
            assert plain["received"] == 5, plain
        else:
            assert plain["sent"] == 0, plain
            server.wait_for_log(r"closed tcp connection .*a plain \(non-TLS\) connection while tlsMode is enforcing")
    finally:
        subprocess.run([RMQ / "bin" / "stop", broker], env=plain_env, capture_output=True, timeout=60)
