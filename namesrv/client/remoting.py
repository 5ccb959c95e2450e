"""AsyncRemotingClient: one reusable connection per address, plus every typed NameServer request."""
from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import zmq.asyncio

from namesrv.client.api import NamesrvApi
from namesrv.client.connection import BaseConnection, RemotingConnection
from namesrv.client.errors import MQResponseError, RemotingConnectError, RemotingError
from namesrv.client.sync import LoopThread, SyncFacade, mirror
from namesrv.client.zmq_connection import CurveClientKeys, ZmqRemotingConnection
from namesrv.protocol import jsonbody
from namesrv.protocol.codes import (DEFAULT_MAX_FRAME_LENGTH, SERVER_VERSION, LanguageCode, RequestCode, ResponseCode,
                                    SerializeType)
from namesrv.protocol.command import RemotingCommand
from namesrv.protocol.route import TopicRouteData
from namesrv.processor.requests import ADMIN_CODES
from namesrv.security import ADMIN_TOKEN_FIELD

Transport = Literal["tcp", "zmq"]


class AsyncRemotingClient(NamesrvApi):
    """Calls NameServers by address ("host:port"), over TCP (RocketMQ framing) or ZeroMQ (msgpack).

    A connection is opened on first use and reused; after it drops, the next call opens a new
    one (calls in flight at the drop fail with `RemotingConnectError`). `serialize_type` picks
    the header codec of every request (JSON or ROCKETMQ binary; ZeroMQ always uses msgpack);
    `version` is the MQVersion ordinal requests claim (>= 401 gets standard-JSON routes);
    `admin_token` is added to admin requests for NameServers that require it (adminToken);
    `zmq_curve` makes ZeroMQ connections CURVE clients (for a server with CURVE on); `tls` makes TCP
    connections TLS ones (`client_tls_context`).

    A NameServer shutting down answers GO_AWAY (RocketMQ 5.x): the call is sent once more on a new
    connection (behind a load balancer it reaches another server), and a second GO_AWAY fails it with
    `RemotingConnectError`, on which a NamesrvClient moves to its next address.
    """

    def __init__(self, *, transport: Transport = "tcp", serialize_type: int = SerializeType.JSON,
                 timeout: float = 3.0, connect_timeout: float = 3.0, version: int = SERVER_VERSION,
                 language: int = LanguageCode.PYTHON, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
                 zmq_context: zmq.asyncio.Context | None = None, admin_token: str | None = None,
                 zmq_curve: CurveClientKeys | None = None, tls: ssl.SSLContext | None = None) -> None:
        if transport not in ("tcp", "zmq"):
            raise ValueError(f"transport must be 'tcp' or 'zmq', got {transport!r}")
        self.transport = transport
        self.serialize_type = SerializeType(serialize_type)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.version = version
        self.language = language
        self.max_frame_length = max_frame_length
        self._zmq_context = zmq_context
        self._zmq_curve = zmq_curve
        self.tls = tls
        self.admin_token = admin_token or None
        self._connections: dict[str, BaseConnection] = {}
        self._connect_locks: dict[str, asyncio.Lock] = {}

    def request(self, code: int, ext_fields: Mapping[str, object] | None = None,
                body: bytes | None = None) -> RemotingCommand:
        """A request in this client's version and language (opaque and codec are set when sent)."""
        fields = dict(ext_fields) if ext_fields is not None else None
        if self.admin_token is not None and code in ADMIN_CODES:
            fields = {**(fields or {}), ADMIN_TOKEN_FIELD: self.admin_token}
        return RemotingCommand.request(code, fields, body, version=self.version, language=self.language)

    async def connection(self, address: str) -> BaseConnection:
        """The open connection to `address`, opening one if there is none (one connect at a time)."""
        connection = self._connections.get(address)
        if connection is not None and not connection.closed:
            return connection
        lock = self._connect_locks.setdefault(address, asyncio.Lock())
        async with lock:
            connection = self._connections.get(address)
            if connection is None or connection.closed:
                connection = await self._open(address)
                self._connections[address] = connection
        return connection

    async def _open(self, address: str) -> BaseConnection:
        if self.transport == "zmq":
            return await ZmqRemotingConnection.open(address, context=self._zmq_context, curve=self._zmq_curve)
        return await RemotingConnection.open(address, serialize_type=self.serialize_type,
                                             connect_timeout=self.connect_timeout,
                                             max_frame_length=self.max_frame_length, tls=self.tls)

    async def invoke(self, address: str, request: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """Send `request` and return the response whatever its code (GO_AWAY aside: see the class)."""
        timeout = self.timeout if timeout is None else timeout
        connection = await self.connection(address)
        response = await connection.invoke(request, timeout)
        if response.code != ResponseCode.GO_AWAY:
            return response
        await self.drop_connection(address)
        connection = await self.connection(address)
        response = await connection.invoke(request, timeout)
        if response.code == ResponseCode.GO_AWAY:
            await self.drop_connection(address)
            raise RemotingConnectError(f"{address} is going away (GO_AWAY twice)")
        return response

    async def invoke_many(self, address: str, requests: Iterable[RemotingCommand],
                          timeout: float | None = None) -> list[RemotingCommand | RemotingError]:
        """Pipeline many requests on one connection; each slot is a response or that call's error."""
        connection = await self.connection(address)
        return await connection.invoke_many(requests, self.timeout if timeout is None else timeout)

    async def invoke_oneway(self, address: str, request: RemotingCommand) -> None:
        connection = await self.connection(address)
        await connection.invoke_oneway(request)

    async def subscribe_route_changes(self, address: str, topics: Iterable[str], on_push: Callable[[RemotingCommand], None],
                                      timeout: float | None = None) -> dict[str, tuple[int, TopicRouteData | None]]:
        """Subscribe to the route changes of `topics` on the connection to `address` (namesrv's
        SUBSCRIBE_ROUTE_CHANGES); pushes go to `on_push`. Returns topic -> (version, route or None).
        A server without push answers REQUEST_CODE_NOT_SUPPORTED (MQResponseError) or, as RocketMQ
        4.9 does with codes it does not know, nothing (RemotingTimeoutError)."""
        connection = await self.connection(address)
        connection.on_request = on_push
        response = await connection.invoke(self.request(RequestCode.SUBSCRIBE_ROUTE_CHANGES,
                                                        {"topics": ";".join(topics)}),
                                           self.timeout if timeout is None else timeout)
        if response.code != ResponseCode.SUCCESS:
            raise MQResponseError(response.code, response.remark, address)
        return {entry["topic"]: (entry["version"], None if entry["route"] is None
                                 else TopicRouteData.from_dict(entry["route"]))
                for entry in jsonbody.loads(response.body or b"{}", "SubscribeRouteChanges").get("routes", [])}

    async def drop_connection(self, address: str) -> None:
        """Close the connection to `address` (a broker does this to look dead to that NameServer)."""
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.close()

    async def close(self) -> None:
        """Close every connection; calls in flight fail with RemotingConnectError."""
        for address in list(self._connections):
            await self.drop_connection(address)
        await asyncio.sleep(0)  # let transports run their close callbacks

    async def __aenter__(self) -> AsyncRemotingClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


@mirror(AsyncRemotingClient)
class RemotingClient(SyncFacade):
    """Blocking twin of AsyncRemotingClient (same methods), for sync code and the admin CLI.

    Pass `runner=` to share one background loop thread between several facades.
    """

    def __init__(self, *, runner: LoopThread | None = None, **options: Any) -> None:
        self._attach(AsyncRemotingClient(**options), runner)


def client_tls_context(trust_cert_path: str | None = None, cert_path: str | None = None,
                       key_path: str | None = None, key_password: str | None = None) -> ssl.SSLContext:
    """A client context for TLS NameServers. With `trust_cert_path` the server's certificate must chain
    to those CAs (RocketMQ's tls.client.authServer); without, any certificate is accepted, as RocketMQ
    clients in their default test mode do (encryption without authenticating the server).
    `cert_path`/`key_path`: a client certificate for servers that ask for one."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if trust_cert_path:
        context.load_verify_locations(trust_cert_path)
        context.check_hostname = False  # RocketMQ checks the chain, not the host name
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_path:
        context.load_cert_chain(cert_path, key_path or None, key_password or None)
    return context
