"""What a remoting call can fail with, so callers can tell "try another server" from "the server said no"."""
from __future__ import annotations


class RemotingError(Exception):
    """Base of every client-side remoting failure."""


class RemotingConnectError(RemotingError):
    """The connection could not be opened, or dropped while the call was in flight.

    Safe to retry on another NameServer (or on the same one: the next call reconnects).
    """


class ServerClosedError(RemotingConnectError):
    """The server closed (or reset) the connection before answering anything: what a server that
    requires TLS (tlsMode=enforcing) does to a plain client, a ZeroMQ endpoint to a RocketMQ one, or a
    server turning connections away.

    `plain`: the connection did not speak TLS (so "try TLS" may be worth saying).
    """

    def __init__(self, message: str, address: str, plain: bool) -> None:
        super().__init__(message)
        self.address = address
        self.plain = plain


class RemotingTimeoutError(RemotingError):
    """No response within the call's timeout; the request may still have been applied."""


class MQResponseError(RemotingError):
    """The server answered with a response code other than SUCCESS.

    `code` is RocketMQ's response code (e.g. 17 TOPIC_NOT_EXIST), `remark` the server's text.
    """

    def __init__(self, code: int, remark: str | None, address: str = "") -> None:
        where = f" from {address}" if address else ""
        super().__init__(f"response code {code}{where}: {remark}")
        self.code = code
        self.remark = remark
        self.address = address


class InvalidRouteError(RemotingError):
    """A NameServer answered a route no client should use (a queue count past any real broker's):
    any peer may register a broker, so a route is checked before anything is built from it."""
