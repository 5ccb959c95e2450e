"""CURVE on the ZeroMQ endpoint: encryption plus an allowlist of client public keys.

CurveZMQ (RFC 26) encrypts every message and authenticates both ends by long-term Curve25519
keys; which client keys may connect is decided by a ZAP handler (pyzmq's ThreadAuthenticator,
a thread on the reactor's ZeroMQ context). Keys are the files `zmq.auth.create_certificates`
writes: the server's `*.key_secret` file, and a directory of allowed clients' public `*.key`
files. Both are read once at start; change the allowlist by restarting. A refused client gets
nothing back (libzmq drops the handshake) and is logged, at most once a second.
"""
from __future__ import annotations

import ipaddress
import logging
import time
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from namesrv.config import ConfigError, NamesrvConfig

log = logging.getLogger(__name__)

SECRET_KEY = "zmqCurveSecretKeyFile"
ALLOWED_CLIENTS = "zmqCurveAllowedClientsDir"
#: Refused handshakes are logged at most this often (a key-guessing flood must not flood the log).
DENIED_LOG_PERIOD = 1.0


class ClientAllowlist:
    """ZAP credentials provider: a client is allowed iff its public key is one of the files' keys."""

    def __init__(self, public_keys: set[bytes]) -> None:
        self._keys = frozenset(public_keys)
        self.denied = 0
        self._logged_at = -DENIED_LOG_PERIOD

    def callback(self, _domain: str, z85_client_key: bytes) -> bool:
        """Called by the authenticator thread for each CURVE handshake."""
        if z85_client_key in self._keys:
            return True
        self.denied += 1
        now = time.monotonic()
        if now - self._logged_at >= DENIED_LOG_PERIOD:
            self._logged_at = now
            log.warning("refused a zmq CURVE client with unknown public key %s (%d refused so far)",
                        z85_client_key.decode("ascii", "replace"), self.denied)
        return False


class CurveServer:
    """The server key pair and the running ZAP handler; `secure(socket)` before the socket binds."""

    def __init__(self, context: zmq.Context, public_key: bytes, secret_key: bytes, allowlist: ClientAllowlist) -> None:
        self._public_key = public_key
        self._secret_key = secret_key
        self._authenticator = ThreadAuthenticator(context, log=logging.getLogger(f"{__name__}.zap"))
        self._authenticator.start()
        self._authenticator.configure_curve_callback(domain="*", credentials_provider=allowlist)

    @classmethod
    def from_config(cls, context: zmq.Context, config: NamesrvConfig) -> CurveServer | None:
        """None when CURVE is off (neither key set); ConfigError when it is half or badly configured."""
        secret_file, clients_dir = config.zmq_curve_secret_key_file, config.zmq_curve_allowed_clients_dir
        if not secret_file and not clients_dir:
            return None
        if not secret_file or not clients_dir:
            missing = SECRET_KEY if not secret_file else ALLOWED_CLIENTS
            raise ConfigError(missing, f"CURVE needs both {SECRET_KEY} and {ALLOWED_CLIENTS}")
        if not zmq.has("curve"):
            raise ConfigError(SECRET_KEY, "this libzmq was built without CURVE")
        try:
            public_key, secret_key = zmq.auth.load_certificate(secret_file)
        except (OSError, ValueError) as exc:
            raise ConfigError(SECRET_KEY, f"cannot read a key pair from {secret_file}: {exc}") from None
        if secret_key is None:
            raise ConfigError(SECRET_KEY, f"{secret_file} holds no secret key (give the .key_secret file)")
        if not Path(clients_dir).is_dir():
            raise ConfigError(ALLOWED_CLIENTS, f"{clients_dir} is not a directory")
        try:
            clients = set(zmq.auth.load_certificates(clients_dir))
        except (OSError, ValueError) as exc:
            raise ConfigError(ALLOWED_CLIENTS, f"cannot read client public keys in {clients_dir}: {exc}") from None
        if not clients:
            raise ConfigError(ALLOWED_CLIENTS, f"no client public key files (*.key) in {clients_dir}")
        log.info("zmq endpoint: CURVE on, %d client keys allowed", len(clients))
        return cls(context, public_key, secret_key, ClientAllowlist(clients))

    def secure(self, sock: zmq.Socket) -> None:
        """Make `sock` a CURVE server (before bind: the mechanism applies to connections made after)."""
        sock.curve_secretkey = self._secret_key
        sock.curve_publickey = self._public_key
        sock.curve_server = True

    def stop(self) -> None:
        self._authenticator.stop()


def exposed_without_curve(endpoint: str) -> bool:
    """Is a ZeroMQ endpoint without CURVE reachable from other machines: tcp on an address that
    is not loopback (0.0.0.0 and :: are every interface)? ipc and inproc are local."""
    if not endpoint.startswith("tcp://"):
        return False
    host = endpoint[len("tcp://"):].rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True  # an interface name or a host name: assume it is reachable
