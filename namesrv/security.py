"""Who may change the NameServer's state: the guard in front of admin requests (issue 8).

RocketMQ's NameServer has no access control at all: anyone who reaches port 9876 can wipe a
broker's write permission, delete topics, rewrite the KV store or update the config (anchors C:
#1842, #7542, CVE-2023-33246/37582). Here the admin request codes can be restricted to an
allowlist of client networks and/or a shared token carried in the request's extFields. Both are
off by default, so stock RocketMQ clients and mqadmin keep working; when both are configured a
request must pass both (the network check first, so a peer outside the allowlist learns nothing
about the token).

Sans-IO: `AdminGuard.refusal` looks only at extFields and the peer's "ip:port".
"""
from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

#: The extFields key an admin client puts the token in (namesrv-admin --token).
ADMIN_TOKEN_FIELD = "adminToken"
#: Shortest token accepted: the token is the only secret, and nothing slows down guessing.
MIN_TOKEN_LENGTH = 16

Network = IPv4Network | IPv6Network
Address = IPv4Address | IPv6Address


def parse_networks(text: str) -> tuple[Network, ...]:
    """`;`-separated CIDRs (a bare address is a /32 or /128); ValueError names a bad entry.

    Host bits set (`10.0.0.1/8`) are an error, not silently widened: that is usually a typo.
    """
    networks = []
    for entry in text.split(";"):
        entry = entry.strip()
        if not entry:
            continue
        try:
            networks.append(ip_network(entry))
        except ValueError as exc:
            raise ValueError(f"{entry!r} is not a network: {exc}") from None
    return tuple(networks)


def check_admin_token(token: str) -> None:
    """ValueError for a token too short to be a secret (empty means: no token required)."""
    if token and len(token) < MIN_TOKEN_LENGTH:
        raise ValueError(f"too short: use at least {MIN_TOKEN_LENGTH} characters (e.g. `openssl rand -hex 32`)")


def peer_ip(remote_addr: str) -> Address | None:
    """The IP of a Channel's remote address, or None when it is unknown or unreadable.

    Accepts "ip:port", "[v6]:port", "v6:port" and a bare IP (the reactor gives the IP alone
    when it cannot read the port). An IPv4-mapped IPv6 peer (dual-stack socket) is its IPv4.
    """
    host, sep, port = remote_addr.rpartition(":")
    candidates = [host.removeprefix("[").removesuffix("]")] if sep and port.isdigit() and host else []
    candidates.append(remote_addr.removeprefix("[").removesuffix("]"))
    for candidate in candidates:
        try:
            address = ip_address(candidate)
        except ValueError:
            continue
        if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
            return address.ipv4_mapped
        return address
    return None


def _digest(token: str) -> bytes:
    # Equal-length digests make compare_digest's running time independent of the token's length too.
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class AdminGuard:
    """Decides whether an admin request may run; immutable, so safe from any thread."""

    __slots__ = ("_networks", "_token_digest")

    def __init__(self, networks: Sequence[Network] = (), token: str = "") -> None:
        self._networks = tuple(networks)
        self._token_digest = _digest(token) if token else None

    @classmethod
    def from_settings(cls, allowed_networks: str, token: str) -> AdminGuard:
        """From the adminAllowedNetworks and adminToken keys (checked when the config was read)."""
        return cls(parse_networks(allowed_networks), token)

    @property
    def restricted(self) -> bool:
        return bool(self._networks) or self._token_digest is not None

    def refusal(self, ext_fields: Mapping[str, str] | None, remote_addr: str) -> str | None:
        """None if the request may run, else the remark saying which rule refused it.

        The remark never contains the token (neither the expected nor the offered one).
        """
        if self._networks:
            address = peer_ip(remote_addr)
            if address is None:
                return "admin request refused: peer address unknown, adminAllowedNetworks cannot admit it"
            if not any(address in network for network in self._networks):
                return f"admin request refused: peer {address} is not in adminAllowedNetworks"
        if self._token_digest is not None:
            offered = (ext_fields or {}).get(ADMIN_TOKEN_FIELD)
            if not isinstance(offered, str):
                return f"admin request refused: extFields {ADMIN_TOKEN_FIELD} is missing"
            if not hmac.compare_digest(_digest(offered), self._token_digest):
                return f"admin request refused: extFields {ADMIN_TOKEN_FIELD} does not match"
        return None
