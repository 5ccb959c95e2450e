"""TLS on the RocketMQ port, sans-IO: the STREAM socket still moves the bytes, OpenSSL only transforms them.

Each TLS connection owns an `ssl.SSLObject` over two memory BIOs (`TlsSession`): ciphertext the
reactor read goes in, plaintext frames come out for the usual FrameDecoder, and replies are
encrypted into one ciphertext message before they join the connection's bounded output. The
first bytes of a connection decide whether it speaks TLS (a handshake record starts with 0x16,
a remoting frame with the top byte of its length, 0 for any frame up to 16 MiB), as RocketMQ's
TlsModeHandler does, under RocketMQ's three modes (`TlsMode`).

`TlsServer` holds the server context and rebuilds it when the certificate, key, trust file or
tlsConfigFile change (checked every RELOAD_CHECK_SECONDS, by content): new connections get the
new context, established ones keep theirs. RocketMQ 5.x reloads only once both the certificate
and the key changed, so a certificate renewed on the same key is never picked up; here any change
reloads, and a pair caught mid-rotation (the key does not match the certificate yet) keeps the
old context until the files load together.
"""
from __future__ import annotations

import datetime
import enum
import hashlib
import logging
import os
import ssl
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from namesrv.config import ConfigError, NamesrvConfig, parse_properties

log = logging.getLogger(__name__)

#: The first byte of a TLS handshake record (RocketMQ's HANDSHAKE_MAGIC_CODE).
HANDSHAKE_RECORD = 0x16
RELOAD_CHECK_SECONDS = 1.0
#: The keys of RocketMQ's tls.properties (TlsSystemConfig) a NameServer reads, with namesrv's key for each.
TLS_PROPERTIES = {
    "tls.test.mode.enable": "tlsTestModeEnable",
    "tls.server.need.client.auth": "tlsServerNeedClientAuth",
    "tls.server.keyPath": "tlsServerKeyPath",
    "tls.server.keyPassword": "tlsServerKeyPassword",
    "tls.server.certPath": "tlsServerCertPath",
    "tls.server.authClient": "tlsServerAuthClient",
    "tls.server.trustCertPath": "tlsServerTrustCertPath",
}


class TlsMode(enum.Enum):
    """RocketMQ's server modes: refuse TLS, accept both, or refuse plain connections."""

    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


#: tlsServerNeedClientAuth (checked by the config) as OpenSSL's verify mode.
CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "require": ssl.CERT_REQUIRED}


class TlsConfigError(ConfigError):
    """The TLS settings cannot make a server context (missing or mismatched files, a setting that authenticates no one)."""

    def __init__(self, message: str) -> None:
        super().__init__("tls", message)


@dataclass(frozen=True)
class TlsSettings:
    """The server's TLS settings: namesrv's keys, overridden by the tlsConfigFile as RocketMQ does."""

    test_mode: bool
    need_client_auth: str
    key_path: str
    key_password: str
    cert_path: str
    auth_client: bool
    trust_cert_path: str

    @classmethod
    def read(cls, config: NamesrvConfig) -> TlsSettings:
        values = {key: config.get(key) for key in TLS_PROPERTIES.values()}
        path = Path(config.tls_config_file) if config.tls_config_file else None
        if path is not None and path.is_file():
            try:
                overrides = {TLS_PROPERTIES[key]: value for key, value in
                             parse_properties(path.read_text(encoding="utf-8")).items() if key in TLS_PROPERTIES}
                values.update({key: config.parse_value(key, value) for key, value in overrides.items()})
            except (OSError, ValueError) as exc:
                raise TlsConfigError(f"tlsConfigFile {path}: {exc}") from None
        return cls(values["tlsTestModeEnable"], values["tlsServerNeedClientAuth"].strip().lower(),
                   values["tlsServerKeyPath"], values["tlsServerKeyPassword"], values["tlsServerCertPath"],
                   values["tlsServerAuthClient"], values["tlsServerTrustCertPath"])

    @property
    def self_signed(self) -> bool:
        """RocketMQ's test mode: a certificate made up at start. Unlike RocketMQ, which then ignores
        configured files, a configured certificate is always the one served."""
        return self.test_mode and not self.cert_path

    def watched(self) -> list[str]:
        return [path for path in (self.cert_path, self.key_path, self.trust_cert_path) if path]


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The server context the settings describe; TlsConfigError naming what is wrong."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.self_signed:
        _load_self_signed(context)
        return context  # test mode asks no client certificate (RocketMQ asks and trusts any)
    if not settings.cert_path or not settings.key_path:
        raise TlsConfigError("tlsServerCertPath and tlsServerKeyPath are required when tlsTestModeEnable is false")
    try:
        context.load_cert_chain(settings.cert_path, settings.key_path, settings.key_password or None)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot load the certificate {settings.cert_path} with the key {settings.key_path}: "
                             f"{getattr(exc, 'reason', None) or exc}") from None
    verify = CLIENT_AUTH[settings.need_client_auth]
    if verify != ssl.CERT_NONE:
        if not settings.auth_client:
            raise TlsConfigError(
                f"tlsServerNeedClientAuth={settings.need_client_auth} with tlsServerAuthClient=false asks for a client "
                "certificate and accepts any (RocketMQ's insecure trust manager), which authenticates no one: set "
                "tlsServerAuthClient=true and tlsServerTrustCertPath, or tlsServerNeedClientAuth=none")
        try:
            if settings.trust_cert_path:
                context.load_verify_locations(settings.trust_cert_path)
            else:
                context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"cannot load tlsServerTrustCertPath {settings.trust_cert_path}: {exc}") from None
        context.verify_mode = verify
    return context


def _load_self_signed(context: ssl.SSLContext) -> None:
    """A fresh EC P-256 key and a self-signed certificate for it (RocketMQ's SelfSignedCertificate)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "namesrv self-signed (tlsTestModeEnable)")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=365)).sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    with tempfile.TemporaryDirectory(prefix="namesrv-tls-") as folder:  # 0700: the key is never readable by others
        path = os.path.join(folder, "self-signed.pem")
        with open(path, "wb") as out:
            out.write(pem)
        context.load_cert_chain(path)


def _fingerprint(paths: list[str]) -> tuple[bytes | None, ...]:
    digests = []
    for path in paths:
        try:
            digests.append(hashlib.sha256(Path(path).read_bytes()).digest())
        except OSError:
            digests.append(None)
    return tuple(digests)


class TlsServer:
    """The mode and the current server context, rebuilt when its files change (`start`/`stop`)."""

    def __init__(self, config: NamesrvConfig) -> None:
        """TlsConfigError if the context cannot be built: a server must not start without the TLS it was asked for."""
        self.mode = TlsMode(config.tls_mode.strip().lower())
        self.handshake_timeout = float(config.tls_handshake_timeout_seconds)
        self._config = config
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.context: ssl.SSLContext | None = None
        #: Contexts built since start (1 + reloads), for tests and logs.
        self.loads = 0
        if self.mode is not TlsMode.DISABLED:
            self._settings = TlsSettings.read(config)
            self._watched = self._watch_list(self._settings)
            self._seen = _fingerprint(self._watched)
            self.context = server_context(self._settings)
            self.loads = 1

    def describe(self) -> str:
        """For the boot line: the mode and which certificate is served."""
        if self.mode is TlsMode.DISABLED:
            return "TLS disabled"
        served = ("a self-signed certificate: tlsTestModeEnable" if self._settings.self_signed
                  else f"certificate {self._settings.cert_path}")
        return f"TLS {self.mode.value} with {served}"

    def _watch_list(self, settings: TlsSettings) -> list[str]:
        return [*settings.watched(), *([self._config.tls_config_file] if self._config.tls_config_file else [])]

    def start(self) -> None:
        if self.mode is TlsMode.DISABLED:
            return
        self._thread = threading.Thread(target=self._watch, name="NamesrvTlsReload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def session(self) -> TlsSession:
        return TlsSession(self.context)

    def reload_if_changed(self) -> bool:
        """Rebuild the context if a watched file's content changed; True if a new context is in use."""
        seen = _fingerprint(self._watched)
        if seen == self._seen:
            return False
        self._seen = seen
        try:
            settings = TlsSettings.read(self._config)
            context = server_context(settings)
        except TlsConfigError as exc:
            log.error("TLS files changed but cannot be used yet (%s); new connections keep the previous "
                      "certificate until they can", exc)
            return False
        self._settings, self.context = settings, context
        self.loads += 1
        self._watched = self._watch_list(settings)
        self._seen = _fingerprint(self._watched)
        log.info("TLS files changed: new connections get certificate %s", settings.cert_path or "(self-signed)")
        return True

    def _watch(self) -> None:
        while not self._stop.wait(RELOAD_CHECK_SECONDS):
            try:
                self.reload_if_changed()
            except Exception:  # noqa: BLE001 - a reload bug must not end the watch
                log.exception("TLS reload check failed")


class TlsSession:
    """One connection's TLS: ciphertext in, plaintext out, and back (reactor thread only).

    What it holds between calls is bounded by the protocol: OpenSSL takes every received byte and
    keeps at most one incomplete record (16 KiB of plaintext and its overhead); the plaintext is
    drained at once into the connection's FrameDecoder, whose incomplete frame counts in the
    in-flight budget, and the ciphertext out joins the connection's bounded output. Until the
    handshake is done, the endpoint counts its state in the in-flight budget too
    (namesrv.remoting.endpoints.TLS_HANDSHAKE_BYTES and `pending`)."""

    __slots__ = ("_incoming", "_outgoing", "_tls", "established")

    def __init__(self, context: ssl.SSLContext) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.established = False

    def receive(self, data: bytes) -> tuple[bytes, bytes]:
        """(plaintext, ciphertext to send back: handshake records, tickets) for received bytes.

        ssl.SSLError for a handshake or record the peer got wrong; ssl.SSLZeroReturnError once the
        peer closed its side of TLS (close_notify)."""
        self._incoming.write(data)
        if not self.established:
            try:
                self._tls.do_handshake()
            except ssl.SSLWantReadError:
                return b"", self._outgoing.read()
            self.established = True
        chunks = []
        while True:
            try:
                chunk = self._tls.read(65536)
            except ssl.SSLWantReadError:
                break
            if not chunk:  # the peer's close_notify (CPython reads it as b"")
                raise ssl.SSLZeroReturnError(ssl.SSL_ERROR_ZERO_RETURN, "TLS connection closed by the peer")
            chunks.append(chunk)
        return b"".join(chunks), self._outgoing.read()

    def encrypt(self, payloads: list[bytes]) -> bytes:
        """The records carrying `payloads`, in order, after anything TLS itself still had to send."""
        self._tls.write(payloads[0] if len(payloads) == 1 else b"".join(payloads))
        return self._outgoing.read()

    def close_notify(self) -> bytes:
        """The records of our close_notify (answering the peer's, so its close is a clean one)."""
        try:
            self._tls.unwrap()
        except ssl.SSLError:
            pass  # its close_notify came first: ours is written, not waited for
        return self._outgoing.read()

    @property
    def pending(self) -> int:
        """Received bytes OpenSSL has not taken yet."""
        return self._incoming.pending

    @property
    def version(self) -> str | None:
        return self._tls.version()
