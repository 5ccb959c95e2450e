"""Hostile peers against a real namesrv process, each measured as issue 15 asks.

For every attack: the server's peak RSS growth while it runs (sampled every 10 ms, children
included), the worst stall a well-behaved client saw meanwhile (a route query every 20 ms on its
own connection: the longest one took), and whether the server still answers afterwards.

    python -m bench attacks [--source TREE] [--only NAME ...] [--scale X]

runs each attack against a fresh server of this checkout, or of TREE (a worktree of an older
commit: the same attacks, before and after), with the server's defaults unless the attack names
a setting, and prints one line per attack. tests/test_attacks.py runs them smaller, with tight
limits, and asserts the bounds. Everything targets 127.0.0.1 and stops by itself.
"""
from __future__ import annotations

import json
import selectors
import shutil
import socket
import ssl
import struct
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import psutil

from bench.lib import cli
from bench.lib.output import Printed, write_results
from bench.lib.servers import percentile, tree_rss_bytes
from namesrv.client import RemotingClient, RemotingError
from namesrv.client.remoting import client_tls_context
from namesrv.config import split_address
from namesrv.fastpath import body_crc32
from namesrv.launcher import NamesrvProcess
from namesrv.protocol import RemotingCommand, RequestCode
from namesrv.protocol.frame import FrameDecoder
from namesrv.routeinfo.persist import FORMAT, MAGIC

_INT32 = struct.Struct(">i")
MiB = 1 << 20
#: The topic the probe asks for, registered before each attack.
PROBE_TOPIC = "ProbeTopic"
PROBE_PERIOD = 0.02
#: A probe request unanswered this long counts as a stall this long (and the probe reconnects).
PROBE_TIMEOUT = 10.0
#: The operator's HTTP port on a free loopback port, for an older checkout too (whose launcher would leave its
#: default, 0.0.0.0:9880, which another server may hold).
LOOPBACK_HTTP = {"httpListenAddress": "127.0.0.1:0"}


def connect(timeout: float = PROBE_TIMEOUT) -> RemotingClient:
    """A blocking remoting client: one connection per server address, kept until it is closed
    (a broker's registration lasts as long as its connection)."""
    return RemotingClient(timeout=timeout, connect_timeout=timeout)


def registration(broker: int, topics: dict[str, tuple[int, int]], *, compressed: bool = False,
                 body: bytes | None = None) -> tuple[dict[str, str], bytes]:
    """(header, body) of broker number `broker`'s REGISTER_BROKER (JSON or compressed layout)."""
    from namesrv.protocol import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
    if body is None:
        table = {name: TopicConfig(name, read, write) for name, (read, write) in topics.items()}
        body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1, 1, 0)), []).encode(compressed)
    header = {"brokerName": f"attacker-{broker}", "brokerAddr": f"10.9.{broker // 250}.{broker % 250}:10911",
              "clusterName": "AttackCluster", "brokerId": "0", "haServerAddr": "10.9.0.1:10912",
              "bodyCrc32": str(body_crc32(body)), "compressed": "true" if compressed else "false"}
    return header, body


@dataclass
class Outcome:
    name: str
    peak_rss_growth: int = 0
    worst_stall: float = 0.0
    answers_after: bool = False
    detail: str = ""
    latencies: list[float] = field(default_factory=list)

    @property
    def p99_stall(self) -> float:
        """The probe's 99th percentile latency, seconds."""
        return percentile(sorted(self.latencies), 99) if self.latencies else 0.0

    def line(self) -> str:
        return (f"{self.name:<22} peak RSS +{self.peak_rss_growth / MiB:7.1f} MiB  worst stall "
                f"{self.worst_stall * 1000:7.0f} ms (p99 {self.p99_stall * 1000:.0f} ms)  answers after: "
                f"{'yes' if self.answers_after else 'NO'}  {self.detail}")


class _Watch:
    """The RSS sampler and the probe client, on threads of their own while an attack runs."""

    def __init__(self, server: NamesrvProcess) -> None:
        self._server = server
        self._process = psutil.Process(server.pid)
        self.base_rss = self._rss()
        self.peak_rss = self.base_rss
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._sample, daemon=True),
                         threading.Thread(target=self._probe, daemon=True)]

    def _rss(self) -> int:
        try:
            return tree_rss_bytes(self._process)
        except psutil.Error:
            return 0

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak_rss = max(self.peak_rss, self._rss())

    def _probe(self) -> None:
        address = self._server.address
        with connect() as client:
            while not self._stop.wait(PROBE_PERIOD):
                start = time.monotonic()
                try:
                    client.invoke(address, client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": PROBE_TOPIC}))
                except RemotingError:
                    client.drop_connection(address)
                self.latencies.append(time.monotonic() - start)

    def __enter__(self) -> _Watch:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(PROBE_TIMEOUT + 1)


def prepare(server: NamesrvProcess) -> RemotingClient:
    """Register the probe's topic from a real-looking broker, whose connection must stay open for
    its routes to stay (a closed broker connection unregisters the broker)."""
    client = connect()
    header, body = registration(0, {PROBE_TOPIC: (4, 4), "Other": (4, 4)})
    header.update(brokerName="probe-broker", clusterName="ProbeCluster")
    client.invoke(server.address, client.request(RequestCode.REGISTER_BROKER, header, body))
    return client


def answers(server: NamesrvProcess) -> bool:
    with connect(timeout=5) as client:
        try:
            request = client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": PROBE_TOPIC})
            return client.invoke(server.address, request).code == 0
        except RemotingError:
            return False


# ---------------------------------------------------------------------- the attacks
# Each takes the server and a scale (1.0: the sizes, where a machine can afford them) and
# returns a detail for the report; it must leave nothing open behind.

def distinct_large_headers(server: NamesrvProcess, scale: float) -> str:
    """Class 1: distinct 1 MiB request headers, each on a connection that then closes."""
    count = int(400 * scale)
    for i in range(count):
        with socket.create_connection(split_address(server.address)) as sock:
            command = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                              {"topic": PROBE_TOPIC, "pad": f"{i:08d}" + "x" * MiB}, opaque=i)
            sock.sendall(command.encode())
            _read_some(sock)
    return f"{count} headers of 1 MiB"


def incomplete_frames(server: NamesrvProcess, scale: float) -> str:
    """Class 1: connections each holding most of a maximal frame, never finishing it."""
    count, size = int(40 * scale), 15 * MiB
    chunk = b"\0" * MiB
    socks = []
    try:
        for _ in range(count):
            sock = socket.create_connection(split_address(server.address))
            socks.append(sock)
            sock.sendall(_INT32.pack(16 * MiB - 4))
            for _ in range(size // MiB):
                sock.sendall(chunk)
        time.sleep(1.0)
        closed = sum(_closed(sock) for sock in socks)
    finally:
        for sock in socks:
            sock.close()
    return f"{count} connections x {size // MiB} MiB of a 16 MiB frame; {closed} closed by the server"


def compressed_bomb(server: NamesrvProcess, scale: float) -> str:
    """Class 2: a compressed REGISTER_BROKER whose filterServerList inflates to `[[],[],...]`."""
    lists = int(20_000_000 * scale)
    junk = b"[" + b"[]," * lists + b"[]]"
    dv = b'{"counter":1,"timestamp":1,"stateVersion":0}'
    body = zlib.compress(_INT32.pack(len(dv)) + dv + _INT32.pack(0) + _INT32.pack(len(junk)) + junk, 9)
    del junk
    answer = _register(server, registration(1, {}, compressed=True, body=body))
    return f"{len(body) // 1024} KiB inflating to {3 * lists // MiB} MiB: {answer}"


def json_lists(server: NamesrvProcess, scale: float) -> str:
    """Class 2's uncompressed twin: a 16 MiB JSON body of `[[],[],...]` as filterServerList."""
    lists = int(5_500_000 * scale)
    body = (b'{"filterServerList":[' + b"[]," * lists + b'[]],"topicConfigSerializeWrapper":{"topicConfigTable":{},'
            b'"dataVersion":{"counter":1,"timestamp":1}}}')
    answer = _register(server, registration(1, {}, body=body))
    return f"{len(body) // MiB} MiB body: {answer}"


def route_table_flood(server: NamesrvProcess, scale: float) -> str:
    """Class 3: made-up brokers each registering thousands of topics with 127-character names."""
    brokers, topics = int(10 * scale) or 1, 20_000
    refused = 0
    held: list[RemotingClient] = []
    try:
        for broker in range(1, brokers + 1):
            table = {f"{broker:03d}{i:07d}".ljust(127, "t"): (8, 8) for i in range(topics)}
            refused += not _register(server, registration(broker, table, compressed=True), held).startswith("code 0")
    finally:
        _close_all(held)
    return f"{brokers} brokers x {topics} topics of 127 characters; {refused} refused"


def unread_replies(server: NamesrvProcess, scale: float) -> str:
    """Class 4: peers asking for a large reply again and again without reading any."""
    table = {f"Topic{i:06d}".ljust(100, "t"): (8, 8) for i in range(12_000)}
    held: list[RemotingClient] = []
    _register(server, registration(1, table, compressed=True), held)
    count, asks = int(20 * scale) or 1, 300
    request = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, opaque=1).encode() * asks
    socks = []
    try:
        for _ in range(count):
            sock = socket.create_connection(split_address(server.address))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(5)
            socks.append(sock)
            try:
                sock.sendall(request)
            except OSError:
                pass
        deadline = time.monotonic() + 10.0  # until the server has given up on every one
        while time.monotonic() < deadline and server.log_text().count("exceed maxConnectionOutputBytes") < count:
            time.sleep(0.1)
        cut = server.log_text().count("exceed maxConnectionOutputBytes")
        closed = _closed_count(socks, count, time.monotonic() + 5.0)  # (the close may come after the log line)
    finally:
        for sock in socks:
            sock.close()
        _close_all(held)
    return (f"{count} peers x {asks} unread topic lists of ~1.3 MB; {cut} given up on (logged), {closed} closed "
            f"by the server")


def zmtp_connect(address: str) -> socket.socket:
    """A raw TCP connection that has made ZMTP 3.0's NULL handshake as a DEALER: what follows is
    frames, sent exactly as written (libzmq's own sockets only ever send a message whole)."""
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.sendall(b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") + bytes(32))
    ready = b"\x05READY" + b"\x0bSocket-Type" + _INT32.pack(6) + b"DEALER"
    sock.sendall(bytes([0x04, len(ready)]) + ready)
    return sock


def zmtp_frame(data: bytes, more: bool) -> bytes:
    """One long ZMTP 3.0 message frame."""
    return bytes([0x02 | (0x01 if more else 0)]) + struct.pack(">Q", len(data)) + data


def zmq_multipart(server: NamesrvProcess, scale: float) -> str:
    """Class 5: one ZeroMQ message of many frames, each under the frame limit, never finished."""
    frames, size = int(40 * scale) or 1, 15 * MiB
    frame = zmtp_frame(bytes(size), more=True)
    sock = zmtp_connect(server.zmq_address)
    sent = 0
    try:
        for _ in range(frames):
            sock.sendall(frame)
            sent += 1
    except OSError:
        pass
    finally:
        time.sleep(1.0)
        closed = _closed(sock)
        sock.close()
    return (f"{sent} of {frames} frames x {size // MiB} MiB of one unfinished message; "
            f"{'reset' if closed else 'not reset'} by the server")


def connection_flood(server: NamesrvProcess, scale: float) -> str:
    """Class 6: thousands of connections opened at once and held."""
    count = int(3000 * scale)
    socks = []
    try:
        for _ in range(count):
            try:
                socks.append(socket.create_connection(split_address(server.address), timeout=2))
            except OSError:
                break
        time.sleep(1.0)
    finally:
        for sock in socks:
            sock.close()
    return f"{len(socks)} of {count} connections opened"


def temp_file_links(server: NamesrvProcess, scale: float) -> str:
    """Issue 31, class 5: symlinks planted at the temporary paths of the KV file and the route
    snapshot (each name a writer could use: `<file>.tmp`, `.<file>.tmp`), pointing at a file of
    the victim's; then a KV write and a snapshot save. Reports whether a victim file changed and
    whether a link was renamed into place."""
    workdir = server.workdir
    victims = []
    for name in ("kvConfig.json", "routes.snapshot"):
        for planted in (f"{name}.tmp", f".{name}.tmp"):
            victim = workdir / f"victim-{len(victims)}"
            victim.write_bytes(b"precious")
            (workdir / planted).symlink_to(victim)
            victims.append(victim)
    with connect() as client:
        request = client.request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v"})
        answer = client.invoke(server.address, request)
    header, body = registration(1, {"LinkTopic": (4, 4)})
    held: list[RemotingClient] = []
    _register(server, (header, body), held)  # a route change: the next periodic save writes the snapshot
    snapshot = workdir / "routes.snapshot"
    deadline = time.monotonic() + 5
    while not snapshot.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    _close_all(held)
    changed = sum(victim.read_bytes() != b"precious" for victim in victims)
    linked = sum((workdir / name).is_symlink() for name in ("kvConfig.json", "routes.snapshot"))
    return (f"PUT_KV_CONFIG code {answer.code}, snapshot {'written' if snapshot.exists() else 'NOT written'}; "
            f"{changed} of {len(victims)} victim files changed, {linked} links renamed into place")


#: Route snapshots with a valid CRC32 whose values no registration could bring: (what, a queue row of
#: topic "Spoiled", the broker group "spoiler" at 127.0.0.1:10911).
SPOILED_SNAPSHOTS = (
    ("writeQueueNums 2^31-1", ["spoiler", 8, 2 ** 31 - 1, 6, 0]),
    ("readQueueNums text", ["spoiler", "x", 8, 6, 0]),
    ("perm null", ["spoiler", 8, 8, None, 0]),
)


def spoiled_snapshot(row: list[object]) -> bytes:
    """A route snapshot file (namesrv.routeinfo.persist's format) holding one broker and the topic
    "Spoiled" with queue row `row`."""
    routes = {"clusters": {"SpoilCluster": ["spoiler"]},
              "groups": [["SpoilCluster", "spoiler", [[0, "127.0.0.1:10911"]], False, None]],
              "live": [["SpoilCluster", "127.0.0.1:10911", None, None, {"counter": 1, "timestamp": 1,
                                                                        "stateVersion": 0}]],
              "filters": [], "mappings": {}, "queues": [["Spoiled", [row]]]}
    payload = msgpack.packb({"format": FORMAT, "takenAtMs": int(time.time() * 1000), "routes": routes})
    return MAGIC + struct.pack(">I", zlib.crc32(payload)) + payload


def snapshot_values(server: NamesrvProcess, scale: float) -> str:
    """Issue 31, class 4: a server started on a route snapshot with a valid CRC32 but values the
    wire refuses or of the wrong type (the file read at start). Reports how many were served."""
    served, set_aside = [], 0
    for what, row in SPOILED_SNAPSHOTS:
        with tempfile.TemporaryDirectory(prefix="namesrv-spoiled-") as folder:
            Path(folder, "routes.snapshot").write_bytes(spoiled_snapshot(row))
            with NamesrvProcess(LOOPBACK_HTTP, workdir=folder, source_root=server.source_root) as started:
                with connect(timeout=5) as client:
                    request = client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Spoiled"})
                    if client.invoke(started.address, request).code == 0:
                        served.append(what)
            set_aside += Path(folder, "routes.snapshot.refused").exists()
    return (f"{len(served)} of {len(SPOILED_SNAPSHOTS)} spoiled snapshots restored and served "
            f"({', '.join(served) or 'none'}); {set_aside} set aside")


def http_slowloris(server: NamesrvProcess, scale: float) -> str:
    """Issue 31, class 3: 36 connections to the operator's HTTP port, each sending one byte of a
    request every 3 s (reopened when the server closes it), for 25 s; meanwhile a probe asks for
    /health and /ready in turn every 0.5 s with a 1-s timeout (a Kubernetes probe's)."""
    duration, count, period = max(5.0, 25 * scale), 36, 3.0
    host, port = split_address(server.http_url.removeprefix("http://"))
    request = b"GET /health HTTP/1.1\r\nHost: namesrv\r\n" + b"X-Trickle: " + b"x" * 4096
    stop = threading.Event()
    reopened = [0]

    def trickle() -> None:
        socks: list[tuple[socket.socket, int]] = []
        try:
            while not stop.is_set():
                kept = []
                for sock, sent in socks:
                    if _closed(sock):
                        sock.close()
                        continue
                    try:
                        sock.sendall(request[sent:sent + 1])
                        kept.append((sock, sent + 1))
                    except OSError:
                        sock.close()
                while len(kept) < count:
                    try:
                        sock = socket.create_connection((host, port), timeout=1)
                        sock.sendall(request[:1])
                        kept.append((sock, 1))
                        reopened[0] += 1
                    except OSError:
                        break
                socks = kept
                stop.wait(period)
        finally:
            for sock, _ in socks:
                sock.close()

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    time.sleep(1.0)  # all of them open
    answered = probes = 0
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        path = "/health" if probes % 2 == 0 else "/ready"
        probes += 1
        started = time.monotonic()
        try:
            with urllib.request.urlopen(server.http_url + path, timeout=1.0) as reply:
                answered += reply.status == 200 and time.monotonic() - started <= 1.0
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(max(0.0, 0.5 - (time.monotonic() - started)))
    stop.set()
    thread.join(period + 5)
    return (f"{answered} of {probes} /health and /ready probes answered within 1 s during {count} trickling "
            f"connections for {duration:.0f} s ({reopened[0]} opened)")


class BrokerPorts:
    """Listening sockets on 127.0.0.1 standing for the brokers a registrant names: the connections
    made to them (in all, and open at once) and the frames received, counted on a thread of their own."""

    def __init__(self, count: int) -> None:
        self._selector = selectors.DefaultSelector()
        self.addresses = []
        for _ in range(count):
            listener = socket.create_server(("127.0.0.1", 0))
            listener.setblocking(False)
            self._selector.register(listener, selectors.EVENT_READ, None)
            self.addresses.append("127.0.0.1:%d" % listener.getsockname()[1])
        self.accepted = self.open = self.peak_open = self.frames = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(0.1):
                if key.data is None:
                    conn, _ = key.fileobj.accept()
                    conn.setblocking(False)
                    self._selector.register(conn, selectors.EVENT_READ, FrameDecoder())
                    self.accepted += 1
                    self.open += 1
                    self.peak_open = max(self.peak_open, self.open)
                    continue
                try:
                    data = key.fileobj.recv(1 << 16)
                except OSError:
                    data = b""
                if data:
                    self.frames += len(key.data.feed(data))
                else:
                    self._selector.unregister(key.fileobj)
                    key.fileobj.close()
                    self.open -= 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()


def notify_fanout(server: NamesrvProcess, scale: float) -> str:
    """Issue 31, class 6: with notifyMinBrokerIdChanged, a registrant lists 100 slaves of an
    acting-master group at ports it chose (listening here), then its master comes and goes 20
    times: each coming and going is one inbound request or closed connection that makes the
    server notify the group's brokers. Counts what reached those ports."""
    slaves, flaps = 100, max(1, int(20 * scale))
    ports = BrokerPorts(slaves)
    held: list[RemotingClient] = []

    def member(broker_id: int, addr: str) -> tuple[dict[str, str], bytes]:
        header, body = registration(0, {"FanTopic": (4, 4), "FanTopic2": (4, 4)})
        header.update(brokerName="fan", clusterName="FanCluster", brokerId=str(broker_id), brokerAddr=addr,
                      enableActingMaster="true")
        return header, body

    try:
        slave_link = connect(timeout=30)
        held.append(slave_link)
        for broker_id, addr in enumerate(ports.addresses, 1):
            slave_link.invoke(server.address, slave_link.request(RequestCode.REGISTER_BROKER, *member(broker_id, addr)))
        for _ in range(flaps):
            _register(server, member(0, "127.0.0.1:9"))  # comes (registers), goes (its connection closes)
            time.sleep(0.2)
        deadline = time.monotonic() + 15
        last = -1
        while time.monotonic() < deadline and ports.frames != last:  # until the notifications stop coming
            last = ports.frames
            time.sleep(1.0)
    finally:
        ports.close()  # before the slaves go: their leaving is no part of the count
        _close_all(held)
    return (f"{2 * flaps} changes to a group of {slaves} slaves: {ports.frames} notifications over "
            f"{ports.accepted} outbound connections ({ports.peak_open} open at once)")


def _call(sock: socket.socket, command: RemotingCommand, timeout: float = 30.0) -> RemotingCommand:
    """Send `command` on a raw connection and read its answer."""
    sock.settimeout(timeout)
    sock.sendall(command.encode())
    decoder = FrameDecoder()
    while True:
        data = sock.recv(1 << 16)
        if not data:
            raise ConnectionError("closed by the server")
        frames = decoder.feed(data)
        if frames:
            return RemotingCommand.decode(frames[0])


def subscription_flood(server: NamesrvProcess, scale: float) -> str:
    """Issue 31, class 2: one peer (127.0.0.2) subscribes to 1,000,000 invented topic names of 120
    characters over 8 connections, 1,000 a request; then a peer of another host (127.0.0.3)
    subscribes to a topic that exists."""
    names, batch, count = int(1_000_000 * scale), 1_000, 8
    address = split_address(server.address)
    socks = [socket.create_connection(address, source_address=("127.0.0.2", 0)) for _ in range(count)]
    subscribed = refused = 0
    reason = ""
    try:
        for start in range(0, names, batch):
            topics = ";".join(f"{i:010d}".ljust(120, "n") for i in range(start, min(names, start + batch)))
            request = RemotingCommand.request(RequestCode.SUBSCRIBE_ROUTE_CHANGES, {"topics": topics}, opaque=start)
            answer = _call(socks[(start // batch) % count], request)
            if answer.code == 0:
                subscribed += min(batch, names - start)
            else:
                refused += 1
                reason = answer.remark or ""
        with socket.create_connection(address, source_address=("127.0.0.3", 0)) as other:
            good = _call(other, RemotingCommand.request(RequestCode.SUBSCRIBE_ROUTE_CHANGES, {"topics": PROBE_TOPIC}))
    finally:
        for sock in socks:
            sock.close()
    return (f"{subscribed} of {names} invented names subscribed over {count} connections ({refused} requests "
            f"refused: {reason[:70]}); another host's subscription: code {good.code} {(good.remark or '')[:60]}")


def _metrics(server: NamesrvProcess) -> dict[str, float]:
    """The server's /metrics samples: series -> value."""
    with urllib.request.urlopen(server.http_url + "/metrics", timeout=5) as reply:
        lines = reply.read().decode().splitlines()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines if line and line[0] != "#"}


def _settled_metric(server: NamesrvProcess, series: str, timeout: float = 10.0) -> float:
    """`series` once the server has taken in what was sent to it: the first non-zero value read
    twice in a row 0.2 s apart (a loaded server reads its sockets late), or the last one read when
    `timeout` runs out."""
    deadline = time.monotonic() + timeout
    last = _metrics(server).get(series, 0.0)
    while time.monotonic() < deadline:
        time.sleep(0.2)
        value = _metrics(server).get(series, 0.0)
        if value and value == last:
            return value
        last = value
    return last


def unread_pushes(server: NamesrvProcess, scale: float) -> str:
    """Issue 31, class 1: 200 connections subscribed to every topic's route changes that never
    read (a 4 KiB receive buffer); a broker of 5,000 topics connects and drops 20 times, each a
    round of 5,000 changes for each subscriber."""
    subscribers, flaps = max(1, int(200 * scale)), max(1, int(20 * scale))
    address = split_address(server.address)
    socks = []
    try:
        for i in range(subscribers):
            sock = socket.create_connection(address)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(RemotingCommand.request(RequestCode.SUBSCRIBE_ROUTE_CHANGES, {"all": "true"},
                                                 opaque=i).encode())
            socks.append(sock)
        time.sleep(0.5)
        broker = registration(1, {f"Flap{i:06d}".ljust(60, "t"): (8, 8) for i in range(5000)}, compressed=True)
        for _ in range(flaps):
            held_open: list[RemotingClient] = []
            _register(server, broker, held_open)  # comes,
            _await_push_round(server)
            _close_all(held_open)  # and goes as its connection closes
            _await_push_round(server)
        time.sleep(1.0)
        samples = _metrics(server)
    finally:
        for sock in socks:
            sock.close()
    held = samples.get('namesrv_in_flight_bytes{kind="pushes"}')
    reset = samples.get('namesrv_connections_cut_total{transport="tcp",cause="slow_reader"}', 0.0)
    rounds = samples["namesrv_route_push_round_seconds_count"]
    return (f"{subscribers} subscribers x {2 * flaps} changes of 5,000 topics ({rounds:.0f} rounds pushed): "
            f"{samples['namesrv_route_subscribers_dropped_total']:.0f} dropped to polling, {reset:.0f} reset; "
            f"pushes held {'(not counted)' if held is None else f'{held / MiB:.1f} MiB'}")


def _await_push_round(server: NamesrvProcess, timeout: float = 10.0) -> None:
    """Wait (at most `timeout` seconds) until the server pushed one more round of route changes, or
    nobody is subscribed any more (dropped to polling or reset: rounds then push nothing): so that
    each change is a round of its own however slow the machine, and no two coalesce."""
    def state() -> tuple[float, float]:
        samples = _metrics(server)
        return samples["namesrv_route_push_round_seconds_count"], samples["namesrv_route_subscribers"]
    rounds, _ = state()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now, subscribed = state()
        if now > rounds or not subscribed:
            return


def client_hello() -> bytes:
    """The first flight of a TLS client (its ClientHello record), as namesrv.client would send it."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_tls_context().wrap_bio(incoming, outgoing)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def tls_states(server: NamesrvProcess, scale: float) -> str:
    """Issue 31, class 7: what each state of a connection to the RocketMQ port costs the server
    with TLS on (tlsMode=permissive), measured one state after another, every connection kept
    open: silent (TCP, nothing sent), handshaking (a ClientHello sent one byte at a time up to
    its 64th, then stalled), established (handshake done, idle) and closing (the client sent its
    close_notify and reads nothing more). Each figure is the server's RSS growth per connection
    of that state; the in-flight budget's count of incomplete input is read while the handshakes
    are stalled."""
    silent, handshaking, established, closing = (max(1, int(n * scale)) for n in (300, 600, 600, 300))
    address = split_address(server.address)
    process = psutil.Process(server.pid)
    context = client_tls_context()
    hello = client_hello()
    held: list[socket.socket] = []
    costs: list[str] = []

    def settled_rss() -> int:
        time.sleep(1.0)
        return max(tree_rss_bytes(process) for _ in range(3))

    def phase(name: str, count: int, make: Callable[[], socket.socket | None]) -> None:
        before = settled_rss()
        for _ in range(count):
            sock = make()
            if sock is not None:
                held.append(sock)
        costs.append(f"{name} {(settled_rss() - before) / count / 1024:.1f} KiB")

    try:
        phase("silent", silent, lambda: socket.create_connection(address))
        stalled = []

        def stall() -> socket.socket:
            sock = socket.create_connection(address)
            stalled.append(sock)
            return sock

        before = settled_rss()
        for _ in range(handshaking):
            held.append(stall())
        for position in range(64):  # one byte at a time to each
            for sock in stalled:
                sock.sendall(hello[position:position + 1])
        counted = _settled_metric(server, 'namesrv_in_flight_bytes{kind="incomplete"}')
        costs.append(f"handshaking {(settled_rss() - before) / handshaking / 1024:.1f} KiB")
        phase("established", established,
              lambda: context.wrap_socket(socket.create_connection(address), server_hostname="namesrv"))

        phase("closing", closing, lambda: _closing_connection(context, address))
    finally:
        for sock in held:
            sock.close()
    return (f"server RSS per connection: {', '.join(costs)}; counted in the in-flight budget while "
            f"{handshaking} handshakes stalled: {counted / MiB:.1f} MiB")


def _closing_connection(context: ssl.SSLContext, address: tuple[str, int]) -> socket.socket:
    """A TLS connection whose client has sent its close_notify and reads nothing more (its TCP
    connection kept open)."""
    raw = socket.create_connection(address)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing)
    raw.settimeout(5)
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            raw.sendall(outgoing.read())
            incoming.write(raw.recv(1 << 16))
    raw.sendall(outgoing.read())
    try:
        tls.unwrap()
    except ssl.SSLWantReadError:
        pass
    raw.sendall(outgoing.read())
    return raw


def _lost_brokers(server: NamesrvProcess, rounds: int, topics: int, tag: str) -> None:
    """Made-up brokers, each registering `topics` new topics of 100 characters and closing its
    connection: every topic gets an event and a last loss in the route history."""
    for round_ in range(rounds):
        table = {f"{tag}{round_:05d}{i:06d}".ljust(100, "h"): (8, 8) for i in range(topics)}
        _register(server, registration(2000 + round_ % 50, table, compressed=True))


def _history(server: NamesrvProcess) -> dict[str, int]:
    with urllib.request.urlopen(server.http_url + "/status.json", timeout=10) as answer:
        return json.loads(answer.read())["history"]


def route_history_churn(server: NamesrvProcess, scale: float) -> str:
    """Issue 33: made-up brokers registering ever new topics and leaving, to fill the route history."""
    rounds, topics = int(60 * scale) or 1, 5_000
    _lost_brokers(server, rounds, topics, "C")
    held = _history(server)
    return (f"{rounds} brokers x {topics} new topics registered and gone; the history holds {held['bytes']} of "
            f"{held['maxBytes']} bytes: {held['events']} events, {held['losses']} last losses, "
            f"{held['forgottenLosses']} forgotten")


def kept_replays(server: NamesrvProcess, scale: float) -> str:
    """Issue 30: data-version queries of ever new made-up brokers, each with a 4 KiB body (a replay
    keeps its digest, not the body): every header read is kept with its last answer, within the
    header memo's and the replays' bounds."""
    count = int(40_000 * scale) or 1
    head = b'{"counter":1,"stateVersion":0,"timestamp":1,"pad":"'
    body = head + b"x" * (4096 - len(head) - 2) + b'"}'
    answered = 0
    with connect(timeout=60) as client:
        for start in range(0, count, 256):
            requests = [client.request(RequestCode.QUERY_DATA_VERSION,
                                        {"clusterName": "Replays", "brokerAddr": f"10.{n >> 16}.{n >> 8 & 255}.{n & 255}:1",
                                         "brokerName": f"replay-{n}", "brokerId": 0}, body)
                        for n in range(start, min(start + 256, count))]
            answers = client.invoke_many(server.address, requests)
            answered += sum(not isinstance(a, RemotingError) and a.code == 0 for a in answers)
    return f"{count} brokers' data-version queries with {len(body)}-byte bodies; {answered} answered"


def explain_flood(server: NamesrvProcess, scale: float) -> str:
    """Issue 33: EXPLAIN_ROUTE for ever new topics from 8 pipelining connections, the history full."""
    _lost_brokers(server, int(30 * scale) or 1, 20_000, "E")
    count, connections = int(4000 * scale) or 1, 8
    answered = [0] * connections

    def ask(index: int) -> None:
        with connect(timeout=60) as client:
            requests = [client.request(RequestCode.EXPLAIN_ROUTE, {"topic": f"Nowhere{index}-{n}"})
                        for n in range(count // connections)]
            for start in range(0, len(requests), 64):
                answers = client.invoke_many(server.address, requests[start:start + 64])
                answered[index] += sum(not isinstance(a, RemotingError) and a.code == 0 for a in answers)

    started = time.monotonic()
    threads = [threading.Thread(target=ask, args=(index,)) for index in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.monotonic() - started
    held = _history(server)
    return (f"{sum(answered)} of {count} explained in {took:.1f} s ({sum(answered) / took:.0f}/s) over a history of "
            f"{held['events']} events ({held['bytes']} bytes)")


def status_poll_flood(server: NamesrvProcess, scale: float) -> str:
    """Issue 33: the status page's JSON asked for by 32 clients at once, again and again, each asking
    a topic search over 20,000 topics, an explanation and the overview."""
    table = {f"Status{i:06d}".ljust(60, "s"): (8, 8) for i in range(20_000)}
    held: list[RemotingClient] = []
    _register(server, registration(1, table, compressed=True), held)
    seconds, clients = 8.0 * scale, 32
    answered = [0] * clients
    deadline = time.monotonic() + seconds

    def poll(index: int) -> None:
        paths = ("/status.json", f"/status/topics.json?q={index:02d}", f"/status/explain.json?topic=Status{index}",
                 f"/status/events.json?after={index}")
        turn = 0
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(server.http_url + paths[turn % len(paths)], timeout=10) as answer:
                    answer.read()
                    answered[index] += 1
            except OSError:
                time.sleep(0.05)  # closed at once past the port's connection bound
            turn += 1

    try:
        threads = [threading.Thread(target=poll, args=(index,)) for index in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        _close_all(held)
    return f"{clients} clients for {seconds:.0f} s: {sum(answered)} answers ({sum(answered) / seconds:.0f}/s)"


def history_file(server: NamesrvProcess, scale: float) -> str:
    """Issue 33: a hostile route history file read at start (routes.snapshot.history, beside the
    route snapshot it is restored with): counts claiming millions of events, then nested arrays up
    to the file's bound."""
    from namesrv.routeinfo.history import FORMAT
    from namesrv.routeinfo.persist import HISTORY_MAGIC
    workdir = Path(tempfile.mkdtemp(prefix="namesrv-history-attack-"))
    try:
        held: list[RemotingClient] = []
        with NamesrvProcess(workdir=workdir) as first:  # its routes and history are saved as it stops
            _register(first, registration(1, {"Kept1": (8, 8), "Kept2": (8, 8)}), held)
        _close_all(held)
        size = int(32 * MiB * scale)
        claims = msgpack.packb([FORMAT, 1, 0, 0, 0, 0, 10_000_000, 10_000_000, 0])
        payload = struct.pack(">q", int(time.time() * 1000)) + claims + b"\xdd" + struct.pack(">I", size) + \
            b"\x91" * (size // 2) + b"\x90" * (size - size // 2)
        (workdir / "routes.snapshot.history").write_bytes(HISTORY_MAGIC + struct.pack(">I", zlib.crc32(payload)) +
                                                          payload)
        peak = 0
        second = NamesrvProcess(workdir=workdir)
        sampling = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not sampling.wait(0.005):
                try:
                    peak = max(peak, tree_rss_bytes(psutil.Process(second.pid)))
                except (psutil.Error, RuntimeError):
                    pass

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        with second:
            refused = next((line for line in second.log_text().splitlines() if "route history" in line), "")
            routed = answers_topic(second, "Kept1")
        sampling.set()
        sampler.join()
        return (f"{(len(payload) + 12) // MiB} MiB file; the starting server's peak RSS {peak / MiB:.0f} MiB; "
                f"{'routes restored' if routed else 'NO routes'}; {refused.split(': ', 1)[-1][:160]}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def answers_topic(server: NamesrvProcess, topic: str) -> bool:
    with connect(timeout=5) as client:
        return client.invoke(server.address, client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                            {"topic": topic})).code == 0


ATTACKS: dict[str, tuple[Callable[[NamesrvProcess, float], str], dict[str, object]]] = {
    "distinct-large-headers": (distinct_large_headers, {}),
    "incomplete-frames": (incomplete_frames, {}),
    "compressed-bomb": (compressed_bomb, {}),
    "json-lists": (json_lists, {}),
    "route-table-flood": (route_table_flood, {}),
    "unread-replies": (unread_replies, {"maxConnectionOutputBytes": 8 * MiB}),
    "zmq-multipart": (zmq_multipart, {}),
    "connection-flood": (connection_flood, {}),
    "temp-file-links": (temp_file_links, {"routeSnapshotIntervalSeconds": 1}),
    "snapshot-values": (snapshot_values, {}),
    "http-slowloris": (http_slowloris, {}),
    "notify-fanout": (notify_fanout, {"notifyMinBrokerIdChanged": True}),
    "subscription-flood": (subscription_flood, {}),
    "unread-pushes": (unread_pushes, {}),
    # (handshakes that outlast the attack: on a loaded host the stalled ones must still be there when counted)
    "tls-states": (tls_states, {"tlsMode": "permissive", "tlsHandshakeTimeoutSeconds": 120}),
    "route-history-churn": (route_history_churn, {}),
    "explain-flood": (explain_flood, {}),
    "kept-replays": (kept_replays, {}),
    "status-poll-flood": (status_poll_flood, {}),
    "history-file": (history_file, {}),
}


def run(name: str, scale: float = 1.0, overrides: dict[str, object] | None = None, source: str | None = None,
        server: NamesrvProcess | None = None) -> Outcome:
    """One attack against a fresh server (or `server`), measured."""
    attack, defaults = ATTACKS[name]
    with _server(server, {**LOOPBACK_HTTP, **defaults, **(overrides or {})}, source) as target:
        broker = prepare(target)
        try:
            time.sleep(0.3)
            with _Watch(target) as watch:
                detail = attack(target, scale)
                time.sleep(0.3)
            return Outcome(name, max(0, watch.peak_rss - watch.base_rss), max(watch.latencies, default=0.0),
                           answers(target), detail, watch.latencies)
        finally:
            broker.close()


@contextmanager
def _server(server: NamesrvProcess | None, overrides: dict[str, object],
            source: str | None) -> Iterator[NamesrvProcess]:
    if server is not None:
        yield server
        return
    with NamesrvProcess(overrides, source_root=source) as started:
        yield started


def _register(server: NamesrvProcess, header_body: tuple[dict[str, str], bytes],
              held: list[RemotingClient] | None = None) -> str:
    """REGISTER_BROKER on a new connection, closed after the answer unless kept in `held` (while
    it is open, what it registered stays)."""
    header, body = header_body
    client = connect(timeout=120)
    try:
        answer = client.invoke(server.address, client.request(RequestCode.REGISTER_BROKER, header, body))
        return f"code {answer.code} {(answer.remark or '')[:90]}"
    except RemotingError as exc:
        return f"connection lost: {exc}"
    finally:
        if held is None:
            client.close()
        else:
            held.append(client)


def _close_all(clients: list[RemotingClient]) -> None:
    for client in clients:
        client.close()


def _read_some(sock: socket.socket) -> None:
    sock.settimeout(5)
    try:
        sock.recv(1 << 16)
    except OSError:
        pass


def _closed(sock: socket.socket) -> bool:
    """Has the server closed (or reset) this connection? Reads what is pending without waiting."""
    sock.setblocking(False)
    try:
        while True:
            if not sock.recv(1 << 20):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def _closed_count(socks: list[socket.socket], expected: int, deadline: float) -> int:
    """How many of `socks` the server has closed, read again until `expected` of them are or until
    `deadline` (time.monotonic()): a server that gives up on a connection logs it before the
    connection's end reaches the peer."""
    closed: set[int] = set()
    while True:
        closed.update(index for index, sock in enumerate(socks) if index not in closed and _closed(sock))
        if len(closed) >= expected or time.monotonic() >= deadline:
            return len(closed)
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("attacks", __doc__)
    parser.add_argument("--source", metavar="TREE",
                        help="run the server from this checkout, e.g. an older commit's worktree (without it: "
                             "this checkout)")
    parser.add_argument("--only", nargs="*", choices=sorted(ATTACKS), metavar="NAME",
                        help=f"run these attacks only (of {', '.join(sorted(ATTACKS))}; without it: all of them)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="attack sizes as a multiple of the issue's (0.1: a tenth of the connections, frames, "
                             "lists)")
    cli.add_out(parser)
    args = parser.parse_args(argv)
    results, say = [], Printed()
    for name in args.only or ATTACKS:
        outcome = run(name, args.scale, source=args.source)
        say(outcome.line())
        results.append({"attack": name, "peak_rss_growth_bytes": outcome.peak_rss_growth,
                        "worst_stall_ms": outcome.worst_stall * 1000, "answers_after": outcome.answers_after,
                        "detail": outcome.detail})
    write_results(cli.out_dir(args, "attacks"), "attacks", results, say, scale=args.scale, source=args.source)
    return 0
