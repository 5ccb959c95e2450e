"""Identity of one client connection, as the route table and the reactor both see it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Channel:
    """A connection: `transport` ("tcp" for the RocketMQ port, "zmq" for the ROUTER endpoint),
    the reactor's routing id, and the peer's "ip:port" (for logs and RocketMQ's address fallback).

    Hashable and compared by (transport, ident), so a broker that reconnects from the same
    address gets a different Channel and the old connection's close cannot remove it.
    """

    transport: str
    ident: bytes
    remote_addr: str = ""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Channel) and self.transport == other.transport and self.ident == other.ident

    def __hash__(self) -> int:
        return hash((self.transport, self.ident))

    def __str__(self) -> str:
        return f"{self.transport}:{self.remote_addr or self.ident.hex()}"
