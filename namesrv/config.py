"""NameServer configuration: RocketMQ's NamesrvConfig + NettyServerConfig keys, plus namesrv's own.

Keys keep RocketMQ's camelCase names in files, on the command line and on the wire
(GET/UPDATE_NAMESRV_CONFIG); attributes are their snake_case twins. Unlike Java, an unknown key
or a value that does not parse is an error naming the key, never silently ignored.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from namesrv.security import check_admin_token, parse_networks

_HOME = Path.home()
#: What GET_NAMESRV_CONFIG and `-p` show instead of a secret's value (too short to be a valid token).
REDACTED = "<redacted>"


class ConfigError(ValueError):
    """A configuration key that does not exist or a value that does not parse."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


def split_address(address: str) -> tuple[str, int]:
    """`host:port` (IPv6 as `[::1]:9880`, an empty host for every interface) as a socket address;
    ValueError naming what is wrong."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected host:port, got {address!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _key(doc: str, default: Any, remote: bool = False, locked: bool = False, secret: bool = False,
         check: Callable[[Any], object] | None = None) -> Any:
    """A config field with its one-line doc. `remote`: UPDATE_NAMESRV_CONFIG may change it;
    `locked`: it never may, whatever configBlackList says; `secret`: shown redacted;
    `check`: raises ValueError for a value that parses but cannot be used."""
    return field(default=default, metadata={"doc": doc, "remote": remote, "locked": locked, "secret": secret,
                                            "check": check})


def _one_of(value: str, allowed: tuple[str, ...]) -> None:
    """A check for a key with named values (case-insensitive, as RocketMQ parses them)."""
    if value.strip().lower() not in allowed:
        raise ValueError(f"expected {', '.join(allowed[:-1])} or {allowed[-1]}, got {value!r}")


def _at_least_one(value: int) -> None:
    if value < 1:
        raise ValueError(f"must be at least 1, got {value}")


def _inert(why: str, default: Any) -> Any:
    """A RocketMQ key namesrv has no use for: accepted at its default (so RocketMQ's own config
    files load), refused with `why` at any other value; a key is never accepted and ignored."""
    shown = ("true" if default else "false") if isinstance(default, bool) else default

    def only_default(value: Any) -> None:
        if value != default:
            raise ValueError(f"{why}; only RocketMQ's default ({shown}) is accepted")
    return _key(f"{why}. Only RocketMQ's default ({shown}) is accepted.", default, check=only_default)


@dataclass
class NamesrvConfig:
    # --- NamesrvConfig (RocketMQ) ---
    rocketmq_home: str = _key("RocketMQ home directory (informational; RocketMQ reads ROCKETMQ_HOME).",
                              os.environ.get("ROCKETMQ_HOME", ""), locked=True)
    kv_config_path: str = _key("KV config file, JSON in RocketMQ's format, written atomically.",
                               str(_HOME / "namesrv" / "kvConfig.json"), locked=True)
    config_store_path: str = _key("Where UPDATE_NAMESRV_CONFIG persists the config (the -c file when given).",
                                  str(_HOME / "namesrv" / "namesrv.properties"), locked=True)
    product_env_name: str = _inert("RocketMQ's clusterTest product environment name: namesrv has no clusterTest mode",
                                   "center")
    cluster_test: bool = _inert("RocketMQ's clusterTest mode (routes from a product environment's NameServer) is "
                                "not implemented", False)
    order_message_enable: bool = _key("Add orderTopicConf (KV namespace ORDER_TOPIC_CONFIG) to topic routes.", False,
                                      remote=True)
    return_order_topic_config_to_broker: bool = _key(
        "Return the ORDER_TOPIC_CONFIG KV table in REGISTER_BROKER responses.", True, remote=True)
    client_request_thread_pool_nums: int = _key("Threads of the route-query executor (GET_ROUTEINFO_BY_TOPIC).", 8)
    default_thread_pool_nums: int = _key("Threads of the default executor (registrations, heartbeats, KV, admin).", 16)
    client_request_thread_pool_queue_capacity: int = _key("Queue bound of the route-query executor.", 50000)
    default_thread_pool_queue_capacity: int = _key("Queue bound of the default executor.", 10000)
    scan_not_active_broker_interval: int = _key("Period of the expired-broker scan, ms.", 5000)
    un_register_broker_queue_capacity: int = _inert(
        "RocketMQ 5.x queues unregistrations (BatchUnregistrationService); namesrv applies each at once, so "
        "nothing is queued", 3000)
    support_acting_master: bool = _key("Promote the lowest slave to id 0 in routes of acting-master groups.", False,
                                       remote=True)
    enable_all_topic_list: bool = _key("Answer GET_ALL_TOPIC_LIST_FROM_NAMESERVER (else SYSTEM_ERROR 'disable').",
                                       True, remote=True)
    enable_topic_list: bool = _key("Answer cluster/unit topic-list queries (else SYSTEM_ERROR 'disable').", True,
                                   remote=True)
    notify_min_broker_id_changed: bool = _key("Send NOTIFY_MIN_BROKER_ID_CHANGE to a group's brokers when its "
                                              "lowest broker id changes (master lost or back).", False, remote=True)
    need_wait_for_service: bool = _key("Refuse route queries for waitSecondsForService after start, unless the routes "
                                       "were restored (routeSnapshotEnable).", False)
    wait_seconds_for_service: int = _key("Seconds route queries are refused after start when needWaitForService.",
                                         45)
    delete_topic_with_broker_registration: bool = _key(
        "Drop a broker's queues of topics missing from its full registration.", False, remote=True)
    route_snapshot_enable: bool = _key("Warm restart: save the route tables (on change, every "
                                       "routeSnapshotIntervalSeconds, and at shutdown) and serve them again at start.",
                                       True)
    route_snapshot_path: str = _key("The route snapshot file; empty: routes.snapshot beside kvConfigPath.", "",
                                    locked=True)
    route_snapshot_interval_seconds: int = _key("How often the route tables are saved if a route changed (else "
                                                "the file is only touched).", 10)
    route_snapshot_max_age_seconds: int = _key("A route snapshot not held by a running server for longer than "
                                               "this is not restored.", 300)
    config_black_list: str = _key("Extra keys (;-separated) UPDATE_NAMESRV_CONFIG may never change.",
                                  "configBlackList;configStorePath;kvConfigPath", locked=True)
    # --- NettyServerConfig (RocketMQ) ---
    bind_address: str = _key("Address the RocketMQ TCP endpoint binds.", "0.0.0.0")
    listen_port: int = _key("RocketMQ remoting TCP port.", 9876)
    server_worker_threads: int = _inert(
        "RocketMQ's Netty codec threads: namesrv decodes and dispatches on its reactor thread, where more threads "
        "would only contend for the interpreter lock; use serverWorkerProcesses for more cores and "
        "clientRequestThreadPoolNums/defaultThreadPoolNums for the executors", 8)
    server_callback_executor_threads: int = _key("Threads of the public executor (unregistered codes); 0 = 4.", 0)
    server_selector_threads: int = _key(
        "ZeroMQ context I/O threads (RocketMQ's selector threads); with serverWorkerProcesses > 1 shared by the "
        "workers (at least one each).", 3)
    server_oneway_semaphore_value: int = _key("Oneway requests in flight at once; beyond it they are dropped.", 256)
    server_async_semaphore_value: int = _inert("RocketMQ's bound of the server's own asynchronous calls: namesrv "
                                               "makes none", 64)
    server_channel_max_idle_time_seconds: int = _key("Close a connection with no traffic for this many seconds.", 120)
    server_socket_snd_buf_size: int = _key("SO_SNDBUF of accepted connections; 0 = OS default.", 0)
    server_socket_rcv_buf_size: int = _key("SO_RCVBUF of accepted connections; 0 = OS default.", 0)
    write_buffer_high_water_mark: int = _key(
        "ZeroMQ send high-water mark per peer, in messages of up to 64 KiB; 0 = half of maxConnectionOutputBytes.", 0)
    write_buffer_low_water_mark: int = _inert("Netty's low water mark: ZeroMQ's send pipe has only a high one "
                                              "(writeBufferHighWaterMark)", 0)
    server_socket_backlog: int = _key("Listen backlog.", 1024)
    enable_shutdown_gracefully: bool = _key(
        "On SIGTERM, keep serving for up to shutdownWaitTimeSeconds before draining, so every RocketMQ 5.3.2+ "
        "client is told GO_AWAY and moves to another NameServer; the wait ends early once every open connection "
        "was told or is an older client. Off (RocketMQ's default), SIGTERM drains and closes at once.", False,
        locked=True)
    shutdown_wait_time_seconds: int = _key("Most seconds enableShutdownGracefully keeps serving after SIGTERM.", 30,
                                           locked=True)
    # --- namesrv's own ---
    zmq_listen_address: str = _key(
        "ZeroMQ ROUTER endpoint for msgpack-framed native peers; empty disables. Loopback by default: without "
        "CURVE (zmqCurveSecretKeyFile) it authenticates no one, so a default install does not offer it to the "
        "network; bound to other interfaces without CURVE, the server says so at start.", "tcp://127.0.0.1:9877")
    max_frame_length: int = _key("Largest frame accepted, length prefix included (RocketMQ: 16 MiB).", 16777216)
    max_connection_output_bytes: int = _key(
        "Unsent reply bytes one connection may hold, one reply aside, before it is closed (at the socket) as a peer "
        "that does not read. A single reply is always sent whole, however large: a slow client reading a big "
        "topic list gets all of it.", 64 * 1024 * 1024)
    max_in_flight_request_bytes: int = _key(
        "Request bytes one server process may hold before answering them: frames still arriving, requests "
        "queued for or running in the executors (counted at their frame size) and their replies not yet taken "
        "by the reactor (an executor with replies to post waits). Past it a complete "
        "request is answered SYSTEM_BUSY (a oneway one dropped), after the connections whose incomplete frame "
        "started longest ago are closed to make room. Never below maxFrameLength. Like Kafka's "
        "queued.max.request.bytes; RocketMQ has no such bound.", 256 * 1024 * 1024, locked=True)
    max_connections: int = _key(
        "Most open connections per endpoint (TCP connections; ZeroMQ peers). One more is closed at once (a "
        "ZeroMQ peer cannot be closed: its messages are dropped unanswered) and logged; 0 = no limit.", 10000,
        locked=True)
    http_listen_address: str = _key(
        "host:port of the operator's HTTP port: /health, /ready (needWaitForService done), /metrics "
        "(Prometheus) and RocketMQ's address service /rocketmq/<subgroup> (namesrvAddressList); empty "
        "disables it.", "0.0.0.0:9880",
        locked=True, check=lambda value: value and split_address(value))
    namesrv_address_list: str = _key(
        "The NameServer addresses (;-separated host:port) the address service answers RocketMQ clients "
        "started with -Drocketmq.namesrv.domain=<this host>:<http port> and no namesrvAddr; empty: 404.", "",
        locked=True)
    zmq_curve_secret_key_file: str = _key(
        "The server's CURVE key pair for the ZeroMQ endpoint: a .key_secret file from "
        "zmq.auth.create_certificates. With zmqCurveAllowedClientsDir it turns CURVE on (encryption and client "
        "authentication); both empty (default) = off. Read at start.", "", locked=True)
    zmq_curve_allowed_clients_dir: str = _key(
        "Directory of the public key files (*.key) of the ZeroMQ clients allowed to connect when CURVE is on; "
        "any other client's handshake is refused (logged). Read at start: restart to change it.", "", locked=True)
    # --- TLS on the RocketMQ port: RocketMQ's TlsSystemConfig (tls.* system properties) as keys ---
    tls_mode: str = _key(
        "RocketMQ's tls.server.mode: disabled (a TLS handshake is refused), permissive (each connection may "
        "speak TLS or plain, told apart by its first byte) or enforcing (a plain connection is closed).",
        "permissive", locked=True, check=lambda value: _one_of(value, ("disabled", "permissive", "enforcing")))
    tls_config_file: str = _key(
        "RocketMQ's tls.config.file: a properties file whose tls.test.mode.enable and tls.server.* entries "
        "override the tls* keys here; read at start and again when it changes. Missing: ignored, as RocketMQ.",
        "/etc/rocketmq/tls.properties", locked=True)
    tls_test_mode_enable: bool = _key(
        "RocketMQ's tls.test.mode.enable: without tlsServerCertPath, serve a self-signed certificate made at "
        "start and ask clients for none. Unlike RocketMQ, a configured certificate is served even in test mode.",
        True, locked=True)
    tls_server_need_client_auth: str = _key(
        "RocketMQ's tls.server.need.client.auth: none, optional or require a client certificate, verified "
        "against tlsServerTrustCertPath (needs tlsServerAuthClient=true: accepting any certificate, as RocketMQ "
        "does otherwise, authenticates no one and is refused at start).", "none", locked=True,
        check=lambda value: _one_of(value, ("none", "optional", "require")))
    tls_server_key_path: str = _key("RocketMQ's tls.server.keyPath: the server's PEM private key; reloaded when it "
                                    "changes.", "", locked=True)
    tls_server_key_password: str = _key("RocketMQ's tls.server.keyPassword: the private key's password, if any.", "",
                                        locked=True, secret=True)
    tls_server_cert_path: str = _key("RocketMQ's tls.server.certPath: the server's PEM certificate chain; reloaded "
                                     "when it changes (new connections get the new one).", "", locked=True)
    tls_server_auth_client: bool = _key("RocketMQ's tls.server.authClient: verify client certificates against "
                                        "tlsServerTrustCertPath (else the system's CAs).", False, locked=True)
    tls_server_trust_cert_path: str = _key("RocketMQ's tls.server.trustCertPath: PEM CAs client certificates must "
                                           "chain to; reloaded when it changes.", "", locked=True)
    tls_handshake_timeout_seconds: int = _key("A TLS connection whose handshake is not done after this many seconds "
                                              "is closed (Netty's SslHandler default).", 10, locked=True)
    # --- namesrv's own: who may change state, and how much one request may register (never remote) ---
    admin_allowed_networks: str = _key(
        "Networks (;-separated CIDRs, IPv4 or IPv6, e.g. 127.0.0.1/32;10.0.0.0/8) allowed to send admin requests "
        "(PUT/DELETE_KV_CONFIG, WIPE/ADD_WRITE_PERM_OF_BROKER, DELETE/REGISTER_TOPIC_IN_NAMESRV, "
        "UPDATE_NAMESRV_CONFIG); others get NO_PERMISSION. Empty (default) = any peer, as RocketMQ: compatible, "
        "but anyone who reaches the port can rewrite routes. Brokers with enableSingleTopicRegister send "
        "REGISTER_TOPIC_IN_NAMESRV: include their network.",
        "", locked=True, check=parse_networks)
    admin_token: str = _key(
        "Shared secret (16+ characters) admin requests must carry as extFields key adminToken "
        "(namesrv-admin --token); else NO_PERMISSION. Empty (default) = none, as RocketMQ: stock mqadmin and "
        "brokers cannot send it. It travels in clear text, so pair it with adminAllowedNetworks; with both set "
        "a request must pass both. Shown redacted by GET_NAMESRV_CONFIG.",
        "", locked=True, secret=True, check=check_admin_token)
    inline_registration_max_body_bytes: int = _key(
        "A changed REGISTER_BROKER body (uncompressed) of at most this many bytes is applied on the reactor "
        "thread instead of the default executor: a worker thread would hold the interpreter lock just as long, "
        "and the hand-off there and back costs more than the work. Larger bodies, whose decode would hold up "
        "every connection, go to the executor. 0 = every changed registration goes to the executor.", 65536)
    max_queue_nums_per_topic: int = _key(
        "Most read or write queues one broker may declare for a topic (REGISTER_BROKER, "
        "REGISTER_TOPIC_IN_NAMESRV); a registration declaring more is refused with SYSTEM_ERROR and the "
        "broker's earlier routes stay. RocketMQ stores any int32, and its clients then build one object per "
        "queue: 2147483647 queues exhaust them. Brokers default to 8 (defaultTopicQueueNums).", 1024, locked=True)
    max_topics_per_registration: int = _key(
        "Most topics one REGISTER_BROKER body may carry; a larger body is refused with SYSTEM_ERROR before it is "
        "decoded (a 16 MiB body of empty topics costs seconds of CPU and hundreds of MiB to decode). "
        "0 = no limit (RocketMQ). The default is far above real brokers (RocketMQ #4245: 10,000 topics each).",
        200000, locked=True)
    max_brokers: int = _key(
        "Most brokers (addresses, slaves included) the route table holds; a registration of one more is refused "
        "with SYSTEM_ERROR naming the limit and changes nothing. RocketMQ has no bound: any peer may register "
        "any number of made-up brokers.", 4096, locked=True)
    max_queue_datas: int = _key(
        "Most topic queue entries the route table holds: one per topic per broker group (a topic on three groups "
        "counts three), the unit its memory grows by (about 60 bytes for an entry of a topic many groups share, up to "
        "500 for a topic of its own; python -m bench scale). A registration "
        "(REGISTER_BROKER, REGISTER_TOPIC_IN_NAMESRV) that would add more is refused with SYSTEM_ERROR naming "
        "the limit and changes nothing. RocketMQ has no bound.", 1000000, locked=True)
    max_route_subscription_topics: int = _key(
        "Most topics named in route-change subscriptions (SUBSCRIBE_ROUTE_CHANGES) over all connections; a "
        "subscription past it is refused with SYSTEM_ERROR.", 1000000, locked=True)
    max_route_subscription_topics_per_connection: int = _key(
        "Most topics one connection's route-change subscription may name (of them at most 1,000 that the route "
        "table does not hold when subscribed); a subscription past it is refused with SYSTEM_ERROR.", 10000,
        locked=True)
    max_route_subscription_topics_per_host: int = _key(
        "Most topics the route-change subscriptions of all connections from one peer host (IP address) may name "
        "together, so that one peer cannot take maxRouteSubscriptionTopics from the others; a subscription past "
        "it is refused with SYSTEM_ERROR.", 100000, locked=True)
    # --- namesrv's own: processes ---
    server_worker_processes: int = _key(
        "Processes serving connections in parallel (1-255). Above 1 the command starts a supervisor and this "
        "many workers sharing the ports (SO_REUSEPORT); each answers reads from its own copy of the tables, and "
        "every write goes through one log that the supervisor orders and every worker applies in that order; the "
        "supervisor alone writes the KV and config files (README: Worker processes). An ipc/inproc "
        "zmqListenAddress is served by worker 0 only.", 1, locked=True)
    # --- namesrv's own: seeing the fleet (README: "Seeing the fleet") ---
    status_page_enable: bool = _key(
        "Serve the status page at / and /status on the operator's HTTP port, with its JSON (clusters, brokers and "
        "their connections, topics, route-change subscribers, the stream of route changes, the divergence "
        "check). adminAllowedNetworks and adminToken apply to its data as to admin requests. false: 404.",
        True, locked=True)
    route_history_max_bytes: int = _key(
        "Bytes the history of route events may hold (what explainRoute and the status page's stream of changes "
        "answer from): a ring of the latest events, and each topic's last loss of its route (at most half of "
        "it), kept after the ring forgot the event. 0 = no history.", 16 * 1024 * 1024, locked=True)
    peer_divergence_peers: str = _key(
        "NameServers (;-separated host:port) this one compares its route table with, continuously, through "
        "RocketMQ's standard requests (namesrv or Java); namesrvAddressList = the address service's list (this "
        "server left out). Results on /metrics (namesrv_peer_divergence_*) and the status page. Empty = off.",
        "", locked=True, check=lambda value: value.strip() == "namesrvAddressList" or [
            split_address(address.strip()) for address in value.split(";") if address.strip()])
    peer_divergence_enable: bool = _key(
        "Run the comparison with peerDivergencePeers (false pauses it and ends a pass under way).", True, remote=True)
    peer_divergence_interval_seconds: int = _key(
        "Seconds between the end of one comparison with the peers and the start of the next (at least 1).", 60,
        check=_at_least_one)
    peer_divergence_routes_per_second: int = _key(
        "Most route queries a comparison sends each NameServer per second (this one included); 0 = as fast as they "
        "answer: how long a pass over a large fleet takes against what it costs them.", 2000)

    # ---- keys ----
    @staticmethod
    def camel(name: str) -> str:
        head, *rest = name.split("_")
        return head + "".join(part.capitalize() for part in rest)

    @classmethod
    def keys(cls) -> dict[str, str]:
        """camelCase key -> attribute name, in declaration order."""
        return {cls.camel(f.name): f.name for f in fields(cls)}

    @classmethod
    def doc(cls, key: str) -> str:
        return next(f.metadata["doc"] for f in fields(cls) if cls.camel(f.name) == key)

    def black_list(self) -> set[str]:
        """Keys UPDATE_NAMESRV_CONFIG refuses: configBlackList plus every locked key (RocketMQ's four
        built-ins and namesrv's security keys), whatever configBlackList says."""
        listed = {k.strip() for k in self.config_black_list.split(";") if k.strip()}
        return listed | {self.camel(f.name) for f in fields(self) if f.metadata["locked"]}

    @classmethod
    def remote_updatable(cls) -> set[str]:
        """The explicit allowlist of keys UPDATE_NAMESRV_CONFIG may change (no paths, ports, pools)."""
        return {cls.camel(f.name) for f in fields(cls) if f.metadata["remote"]}

    # ---- values ----
    def get(self, key: str) -> Any:
        try:
            return getattr(self, self.keys()[key])
        except KeyError:
            raise ConfigError(key, "unknown configuration key") from None

    def parse_value(self, key: str, text: str) -> Any:
        """`text` converted to the type of `key` and checked, or ConfigError naming the key."""
        attribute = self.keys().get(key)
        if attribute is None:
            raise ConfigError(key, "unknown configuration key")
        spec = next(f for f in fields(self) if f.name == attribute)
        value = self._convert(key, _TYPES[spec.type], text.strip())
        if spec.metadata["check"] is not None:
            try:
                spec.metadata["check"](value)
            except ValueError as exc:
                raise ConfigError(key, str(exc)) from None
        return value

    @staticmethod
    def _convert(key: str, kind: type, text: str) -> Any:
        if kind is bool:
            if text.lower() not in ("true", "false"):
                raise ConfigError(key, f"expected true or false, got {text!r}")
            return text.lower() == "true"
        if kind is int:
            try:
                value = int(text)
            except ValueError:
                raise ConfigError(key, f"expected an integer, got {text!r}") from None
            if value < 0:
                raise ConfigError(key, f"must not be negative, got {value}")
            return value
        return text

    def apply(self, properties: dict[str, str]) -> None:
        """Set every key of `properties`; all are validated before any is applied."""
        parsed = {key: self.parse_value(key, value) for key, value in properties.items()}
        keys = self.keys()
        for key, value in parsed.items():
            setattr(self, keys[key], value)

    def to_properties(self, reveal_secrets: bool = False) -> dict[str, str]:
        """Every key's value as text; secrets redacted unless revealed."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.metadata["secret"] and value and not reveal_secrets:
                value = REDACTED
            out[self.camel(f.name)] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return out

    def to_text(self, reveal_secrets: bool = False) -> str:
        """`key=value` lines sorted by key (GET_NAMESRV_CONFIG's body, as RocketMQ 5.x); secrets are
        redacted unless revealed (only for writing the config file)."""
        properties = self.to_properties(reveal_secrets)
        return "".join(f"{key}={escape_property(value)}\n" for key, value in sorted(properties.items()))

    @classmethod
    def load(cls, path: str | None = None, overrides: dict[str, str] | None = None) -> NamesrvConfig:
        """Defaults, then the properties file (which becomes configStorePath), then overrides."""
        config = cls()
        if path is not None:
            config.apply(parse_properties(Path(path).read_text(encoding="utf-8")))
            config.config_store_path = str(path)
        if overrides:
            config.apply(overrides)
        return config


_TYPES = {"bool": bool, "int": int, "str": str}
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_KEY_END = re.compile(r"(?<!\\)[=: \t\f]")


def _unescape(text: str) -> str:
    out = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            nxt = text[index + 1]
            if nxt == "u" and index + 6 <= len(text):
                try:
                    out.append(chr(int(text[index + 2:index + 6], 16)))
                    index += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _entries(lines: list[str]) -> list[tuple[int, int, str, str]]:
    """(first line, line after the last, key, value) of every entry of Java `Properties.load`
    syntax: `key=value`, `key:value` or `key value`; `#`/`!` comments, backslash escapes and
    line continuations."""
    entries: list[tuple[int, int, str, str]] = []
    pending: str | None = None
    first = 0
    for index, raw in enumerate(lines):
        line = raw.lstrip(" \t\f")
        if pending is None:
            if not line or line[0] in "#!":
                continue
            pending, first = "", index
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        entries.append((first, index + 1, *_split_entry(pending + line)))
        pending = None
    if pending is not None:
        entries.append((first, len(lines), *_split_entry(pending)))
    return entries


def _split_entry(line: str) -> tuple[str, str]:
    match = _KEY_END.search(line)
    if match is None:
        return _unescape(line), ""
    rest = line[match.start():].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(line[:match.start()]), _unescape(rest)


def parse_properties(text: str) -> dict[str, str]:
    """A properties file's entries (Java `Properties.load` syntax; the last of a repeated key wins)."""
    return {key: value for _, _, key, value in _entries(text.splitlines())}


def update_properties(text: str, properties: dict[str, str]) -> str:
    """`text` with the entries of `properties` set: an entry already there is rewritten in place
    (the last, which is the one read; earlier repeats are left as they are), any other appended;
    every other line, comments included, stays as it was."""
    lines = text.splitlines()
    last = {key: (start, end) for start, end, key, _ in _entries(lines)}
    appended = []
    replaced = []
    for key, value in properties.items():
        line = f"{key}={escape_property(value)}"
        if key in last:
            replaced.append((*last[key], line))
        else:
            appended.append(line)
    for start, end, line in sorted(replaced, reverse=True):  # from the end: earlier indexes stay valid
        lines[start:end] = [line]
    return "\n".join(lines + appended) + "\n"


def escape_property(value: str) -> str:
    """Escape a value so `parse_properties` reads it back unchanged."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return "\\" + out if out.startswith((" ", "\t")) else out
