"""X.509 certificate authority, revocation lists, chain verification and mutual-TLS contexts.

narada-secure-delivery.txt §IV-A: exactly one CA issues certificates to every entity and the
certificate "can also identify an entity as an authorized KMC or TDN"; the CA manages the
revocation lists that brokers and KMCs consult (§IV-H1). hermes-encrypted-access-control.txt
§2.4: every broker/client connection runs over TLS. ARCHITECTURE.md replaces the papers'
ad-hoc RSA-1024 certificates with X.509 via ``cryptography.x509`` and Ed25519.

Theory of operation
-------------------
* A :class:`CertificateAuthority` lives in a directory: ``ca.pem`` (self-signed Ed25519 root),
  ``ca.key.pem`` and ``crl.pem``. The CA key is **always encrypted at rest** with the operator's
  passphrase (PKCS#8, ``BestAvailableEncryption``) and the file is created ``0600``: the CA is
  offline (§IV-A) and long-lived, so nobody has to type its passphrase during normal running.
  The CRL file *is* the revocation state: ``revoke`` re-signs it with every earlier entry.
  A CRL is valid for :data:`DEFAULT_CRL_DAYS` unless ``crl(days=...)`` says otherwise and
  must be re-signed before its next update (:mod:`pubguard.crypto.crl_renewal` decides when;
  ``pubguard ca crl-agent`` / ``renew-crl`` do it), since OpenSSL refuses every certificate
  checked against an expired one. Each write is atomic (a temporary file renamed over
  ``crl.pem``) and, under a lock, keeps every serial the file already lists.
* Issued certificates carry the entity's :class:`Role` as the subject's organizational unit
  (``OU=broker``), visible with ``openssl x509 -text``, plus SubjectAlternativeName
  ``IP:127.0.0.1, DNS:localhost`` (configurable) so they double as TLS identities, and
  ExtendedKeyUsage (client auth for every role, server auth for services and brokers).
* TLS identity keys (:func:`issue_tls_identity`) are written ``0600``, encrypted (PKCS#8) when
  a passphrase is given; the contexts load them with ``password=`` and never prompt on a
  terminal. ``pubguard.ops.pki`` takes the passphrase from ``PUBGUARD_TLS_PASSPHRASE``, which
  a service manager hands to brokers that must restart unattended.
* :func:`verify_chain` checks issuer signature, validity window at ``now`` (the clock is an
  argument, as in ``cryptography``'s ``*_at_time`` twins), the CA's basic constraints and the
  CRL (signature, issuer, freshness). A listed serial raises :class:`RevokedError`; any other
  failure is the opaque :class:`InvalidToken`.
* :func:`server_ssl_context` / :func:`client_ssl_context` build TLS 1.3-only contexts that
  require and verify the peer's certificate against the CA (and the CRL, if given).
  Ed25519 certificates work in TLS 1.3 with OpenSSL >= 1.1.1 (tested on loopback).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import enum
import fcntl
import ipaddress
import os
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pubguard.crypto.signing import SigningKey, VerifyKey
from pubguard.errors import ConfigError, InvalidToken, RevokedError, StateError, ValidationError

__all__ = [
    "CA_CERT_FILE",
    "CA_KEY_FILE",
    "CRL_FILE",
    "DEFAULT_CRL_DAYS",
    "Certificate",
    "CertificateAuthority",
    "RevocationList",
    "Role",
    "TlsIdentity",
    "client_ssl_context",
    "issue_tls_identity",
    "load_certificate",
    "load_crl",
    "server_ssl_context",
    "verify_chain",
]

CA_CERT_FILE: Final = "ca.pem"
CA_KEY_FILE: Final = "ca.key.pem"
CRL_FILE: Final = "crl.pem"
CRL_LOCK_FILE: Final = "crl.lock"
DEFAULT_CA_DAYS: Final = 3650
DEFAULT_CERT_DAYS: Final = 365
DEFAULT_CRL_DAYS: Final = 7
_UTC = _dt.UTC


class Role(enum.StrEnum):
    """What an entity is allowed to be (narada §IV-A: the certificate names KMCs and TDNs)."""

    CA = "ca"
    BROKER = "broker"
    CLIENT = "client"
    KMC = "kmc"
    KDC = "kdc"
    MS = "ms"
    TDN = "tdn"


_SERVER_ROLES: Final = frozenset({Role.BROKER, Role.KMC, Role.KDC, Role.MS, Role.TDN})


def _when(now: _dt.datetime | float) -> _dt.datetime:
    if isinstance(now, _dt.datetime):
        if now.tzinfo is None:
            raise ValidationError("datetimes must be timezone-aware (UTC)")
        return now.astimezone(_UTC).replace(microsecond=0)
    return _dt.datetime.fromtimestamp(int(now), _UTC)


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a new ``0600`` file (refuse to overwrite: keys are never clobbered)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        raise StateError(f"refusing to overwrite existing key file {path}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)


@contextlib.contextmanager
def _crl_lock(ca_dir: Path) -> Iterator[None]:
    """An exclusive lock (``flock`` on ``crl.lock``) for one read-merge-write of the CRL."""
    fd = os.open(ca_dir / CRL_LOCK_FILE, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _encryption(passphrase: bytes | None) -> serialization.KeySerializationEncryption:
    if passphrase is None:
        return serialization.NoEncryption()
    if not passphrase:
        raise ValidationError("empty passphrase")
    return serialization.BestAvailableEncryption(passphrase)


class Certificate:
    """An issued X.509 certificate with the pubguard role, name and public key exposed."""

    __slots__ = ("_c",)

    def __init__(self, cert: x509.Certificate) -> None:
        self._c = cert

    @classmethod
    def from_pem(cls, data: bytes) -> Certificate:
        """Parse a presented certificate; malformed bytes are an opaque :class:`InvalidToken`."""
        try:
            return cls(x509.load_pem_x509_certificate(data))
        except (ValueError, TypeError):
            raise InvalidToken("malformed certificate") from None

    @classmethod
    def from_der(cls, data: bytes) -> Certificate:
        try:
            return cls(x509.load_der_x509_certificate(data))
        except (ValueError, TypeError):
            raise InvalidToken("malformed certificate") from None

    def to_pem(self) -> bytes:
        return self._c.public_bytes(serialization.Encoding.PEM)

    def to_der(self) -> bytes:
        return self._c.public_bytes(serialization.Encoding.DER)

    def _attr(self, oid: x509.ObjectIdentifier) -> str:
        attrs = self._c.subject.get_attributes_for_oid(oid)
        return str(attrs[0].value) if attrs else ""

    @property
    def name(self) -> str:
        return self._attr(NameOID.COMMON_NAME)

    @property
    def subject(self) -> str:
        """The distinguished name (RFC 4514), the paper's "identifier or Distinguished Name"."""
        return self._c.subject.rfc4514_string()

    @property
    def role(self) -> Role:
        try:
            return Role(self._attr(NameOID.ORGANIZATIONAL_UNIT_NAME))
        except ValueError:
            raise InvalidToken("certificate carries no pubguard role") from None

    @property
    def serial(self) -> int:
        return self._c.serial_number

    @property
    def not_before(self) -> _dt.datetime:
        return self._c.not_valid_before_utc

    @property
    def not_after(self) -> _dt.datetime:
        return self._c.not_valid_after_utc

    @property
    def fingerprint(self) -> bytes:
        """SHA-256 of the DER encoding."""
        return self._c.fingerprint(hashes.SHA256())

    @property
    def verify_key(self) -> VerifyKey:
        """The subject's Ed25519 key (raises :class:`InvalidToken` for other key types)."""
        key = self._c.public_key()
        if not isinstance(key, Ed25519PublicKey):
            raise InvalidToken("certificate key is not Ed25519")
        return VerifyKey(key)

    @property
    def x509(self) -> x509.Certificate:
        return self._c

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Certificate) and other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return f"Certificate({self.subject!r}, serial={self.serial:x})"


def load_certificate(path: str | os.PathLike[str]) -> Certificate:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read certificate: {exc.strerror}", path=str(path)) from None
    try:
        return Certificate.from_pem(data)
    except InvalidToken:
        raise ConfigError("not a PEM certificate", path=str(path)) from None


class RevocationList:
    """A signed CRL: the set of revoked serial numbers and its validity window."""

    __slots__ = ("_crl",)

    def __init__(self, crl: x509.CertificateRevocationList) -> None:
        self._crl = crl

    @classmethod
    def from_pem(cls, data: bytes) -> RevocationList:
        try:
            return cls(x509.load_pem_x509_crl(data))
        except (ValueError, TypeError):
            raise InvalidToken("malformed CRL") from None

    def to_pem(self) -> bytes:
        return self._crl.public_bytes(serialization.Encoding.PEM)

    @property
    def serials(self) -> frozenset[int]:
        return frozenset(r.serial_number for r in self._crl)

    @property
    def last_update(self) -> _dt.datetime:
        return self._crl.last_update_utc

    @property
    def next_update(self) -> _dt.datetime | None:
        return self._crl.next_update_utc

    def expired(self, now: _dt.datetime | float) -> bool:
        """Whether ``now`` is past the list's next update: OpenSSL then refuses every peer
        certificate checked against it (``CRL has expired``)."""
        nxt = self.next_update
        return nxt is not None and _when(now) > nxt

    def is_revoked(self, cert: Certificate | int) -> bool:
        serial = cert.serial if isinstance(cert, Certificate) else cert
        return self._crl.get_revoked_certificate_by_serial_number(serial) is not None

    def check(self, ca_cert: Certificate, now: _dt.datetime | float) -> None:
        """Raise :class:`InvalidToken` unless signed by ``ca_cert`` and fresh at ``now``."""
        t = _when(now)
        key = ca_cert.x509.public_key()
        if self._crl.issuer != ca_cert.x509.subject or not isinstance(key, Ed25519PublicKey):
            raise InvalidToken()
        if not self._crl.is_signature_valid(key):
            raise InvalidToken()
        nxt = self.next_update
        if t < self.last_update or (nxt is not None and t > nxt):
            raise InvalidToken()


def load_crl(path: str | os.PathLike[str]) -> RevocationList:
    """The CRL in ``path``; one-line :class:`ConfigError` if it is unreadable or no CRL."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read CRL: {exc.strerror}", path=str(path)) from None
    try:
        return RevocationList.from_pem(data)
    except InvalidToken:
        raise ConfigError("not a PEM CRL", path=str(path)) from None


def verify_chain(
    cert: Certificate,
    ca_cert: Certificate,
    crl: RevocationList | None = None,
    *,
    now: _dt.datetime | float,
    role: Role | None = None,
) -> Role:
    """Verify ``cert`` was issued by ``ca_cert``, is valid at ``now``, is not revoked, and (if
    given) has ``role``. Returns the certificate's role. Revocation -> :class:`RevokedError`;
    any other failure -> :class:`InvalidToken` (opaque, like every authentication failure)."""
    t = _when(now)
    ca = ca_cert.x509
    try:
        bc = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
        cert.x509.verify_directly_issued_by(ca)
    except (x509.ExtensionNotFound, ValueError, TypeError, InvalidSignature):
        raise InvalidToken() from None
    if not bc.ca:
        raise InvalidToken()
    for c in (ca_cert, cert):
        if not c.not_before <= t <= c.not_after:
            raise InvalidToken()
    if crl is not None:
        crl.check(ca_cert, t)
        if crl.is_revoked(cert):
            raise RevokedError(f"certificate {cert.subject} (serial {cert.serial:x}) is revoked")
    got = cert.role
    if role is not None and got != role:
        raise InvalidToken()
    return got


class CertificateAuthority:
    """The one CA of narada §IV-A: issues role certificates and maintains the CRL."""

    __slots__ = ("_key", "_revoked", "cert", "path")

    def __init__(
        self,
        cert: Certificate,
        key: Ed25519PrivateKey,
        path: Path,
        revoked: dict[int, _dt.datetime],
    ) -> None:
        self.cert = cert
        self._key = key
        self.path = path
        self._revoked = revoked

    # -- lifecycle -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        name: str,
        path: str | os.PathLike[str],
        *,
        passphrase: bytes,
        now: _dt.datetime | float,
        days: int = DEFAULT_CA_DAYS,
    ) -> CertificateAuthority:
        """Create a new CA in directory ``path`` (created ``0700``; refuses an existing CA)."""
        if not name:
            raise ValidationError("CA name must not be empty")
        p = Path(path)
        if (p / CA_CERT_FILE).exists():
            raise StateError(f"a CA already exists in {p}")
        p.mkdir(mode=0o700, parents=True, exist_ok=True)
        t = _when(now)
        key = Ed25519PrivateKey.generate()
        subject = x509.Name(
            [
                x509.NameAttribute(NameOID.COMMON_NAME, name),
                x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, Role.CA.value),
            ]
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(t)
            .not_valid_after(t + _dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
        )
        cert = Certificate(builder.sign(key, None))
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            _encryption(passphrase),
        )
        _write_private(p / CA_KEY_FILE, pem)
        (p / CA_CERT_FILE).write_bytes(cert.to_pem())
        ca = cls(cert, key, p, {})
        ca._write_crl(t)
        return ca

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, passphrase: bytes) -> CertificateAuthority:
        p = Path(path)
        cert = load_certificate(p / CA_CERT_FILE)
        try:
            key = serialization.load_pem_private_key(
                (p / CA_KEY_FILE).read_bytes(), password=passphrase
            )
        except OSError as exc:
            raise ConfigError(f"cannot read CA key: {exc.strerror}", path=str(p)) from None
        except (ValueError, TypeError):
            raise ConfigError(
                "cannot decrypt the CA key (wrong passphrase?)", path=str(p)
            ) from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigError("CA key is not Ed25519", path=str(p))
        revoked: dict[int, _dt.datetime] = {}
        crl_path = p / CRL_FILE
        if crl_path.exists():
            crl = RevocationList.from_pem(crl_path.read_bytes())
            revoked = {r.serial_number: r.revocation_date_utc for r in crl._crl}
        return cls(cert, key, p, revoked)

    # -- issuing ---------------------------------------------------------------------------

    def issue(
        self,
        name: str,
        role: Role | str,
        public_key: VerifyKey | ec.EllipticCurvePublicKey,
        *,
        now: _dt.datetime | float,
        days: int = DEFAULT_CERT_DAYS,
        dns: tuple[str, ...] = ("localhost",),
        ips: tuple[str, ...] = ("127.0.0.1",),
    ) -> Certificate:
        """Issue a certificate for ``name`` with ``role`` over ``public_key``."""
        try:
            r = Role(role)
        except ValueError:
            raise ValidationError(
                f"unknown role {role!r} (valid: {', '.join(x.value for x in Role)})"
            ) from None
        if r is Role.CA or not name:
            raise ValidationError("issue needs a non-empty name and a non-CA role")
        key = public_key.cryptography_key if isinstance(public_key, VerifyKey) else public_key
        t = _when(now)
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if r in _SERVER_ROLES:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        try:
            san = [x509.DNSName(d) for d in dns] + [
                x509.IPAddress(ipaddress.ip_address(i)) for i in ips
            ]
        except ValueError as exc:
            raise ValidationError(f"bad subject alternative name: {exc}") from None
        builder = (
            x509.CertificateBuilder()
            .subject_name(
                x509.Name(
                    [
                        x509.NameAttribute(NameOID.COMMON_NAME, name),
                        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, r.value),
                    ]
                )
            )
            .issuer_name(self.cert.x509.subject)
            .public_key(key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(t)
            .not_valid_after(min(t + _dt.timedelta(days=days), self.cert.not_after))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectAlternativeName(san), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        return Certificate(builder.sign(self._key, None))

    def issue_signing_identity(
        self, name: str, role: Role | str, *, now: _dt.datetime | float, days: int = 365
    ) -> tuple[Certificate, SigningKey]:
        """A fresh Ed25519 key pair and its certificate (for KMC requests, token signing)."""
        sk = SigningKey.generate()
        return self.issue(name, role, sk.public, now=now, days=days), sk

    # -- revocation ------------------------------------------------------------------------

    def revoke(self, cert: Certificate | int, *, now: _dt.datetime | float) -> RevocationList:
        """Add ``cert`` (or a serial number) to the CRL and re-sign it."""
        serial = cert.serial if isinstance(cert, Certificate) else int(cert)
        t = _when(now)
        self._revoked.setdefault(serial, t)
        return self._write_crl(t)

    def crl(self, *, now: _dt.datetime | float, days: float = DEFAULT_CRL_DAYS) -> RevocationList:
        """A freshly signed CRL listing every revoked serial, valid for ``days`` from ``now``
        (also written to ``crl.pem``)."""
        if not days > 0:
            raise ValidationError("a CRL must be valid for a positive number of days")
        return self._write_crl(_when(now), days)

    def _write_crl(self, t: _dt.datetime, days: float = DEFAULT_CRL_DAYS) -> RevocationList:
        """Sign and write ``crl.pem`` atomically (a temporary file renamed over it), under a
        lock and with every serial the file on disk already lists: another process holding
        the CA (``revoke``, the CRL agent) may have re-signed it since this one loaded it, and
        a renewal must never drop a revocation."""
        with _crl_lock(self.path):
            for serial, when in self._listed_on_disk().items():
                self._revoked.setdefault(serial, when)
            builder = (
                x509.CertificateRevocationListBuilder()
                .issuer_name(self.cert.x509.subject)
                .last_update(t)
                .next_update(t + _dt.timedelta(days=days))
            )
            for serial, when in sorted(self._revoked.items()):
                builder = builder.add_revoked_certificate(
                    x509.RevokedCertificateBuilder()
                    .serial_number(serial)
                    .revocation_date(min(when, t))
                    .build()
                )
            crl = RevocationList(builder.sign(self._key, None))
            tmp = self.path / f"{CRL_FILE}.{os.getpid()}.tmp"
            with tmp.open("wb") as f:
                f.write(crl.to_pem())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path / CRL_FILE)
        return crl

    def _listed_on_disk(self) -> dict[int, _dt.datetime]:
        """The serials of this CA's ``crl.pem`` as it is on disk (none if it is missing or
        not signed by this CA)."""
        try:
            crl = RevocationList.from_pem((self.path / CRL_FILE).read_bytes())
        except (OSError, InvalidToken):
            return {}
        key = self.cert.x509.public_key()
        if crl._crl.issuer != self.cert.x509.subject or not isinstance(key, Ed25519PublicKey):
            return {}
        if not crl._crl.is_signature_valid(key):
            return {}
        return {r.serial_number: r.revocation_date_utc for r in crl._crl}

    def __repr__(self) -> str:
        return f"CertificateAuthority({self.cert.subject!r}, path={str(self.path)!r})"


# -- TLS --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class TlsIdentity:
    """Paths written by :func:`issue_tls_identity`."""

    cert_path: Path
    key_path: Path
    ca_path: Path
    crl_path: Path


def issue_tls_identity(
    ca: CertificateAuthority,
    name: str,
    role: Role | str,
    out_dir: str | os.PathLike[str],
    *,
    now: _dt.datetime | float,
    key_type: str = "ed25519",
    passphrase: bytes | None = None,
    days: int = DEFAULT_CERT_DAYS,
) -> TlsIdentity:
    """Generate a key pair for ``name``, have ``ca`` certify it, and write ``<name>.pem``,
    ``<name>.key.pem`` (``0600``; encrypted iff ``passphrase``), ``ca.pem`` and ``crl.pem``
    into ``out_dir``. ``key_type`` is ``ed25519`` (default) or ``p256`` (ECDSA)."""
    out = Path(out_dir)
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    private: Ed25519PrivateKey | ec.EllipticCurvePrivateKey
    if key_type == "ed25519":
        private = Ed25519PrivateKey.generate()
        pub: VerifyKey | ec.EllipticCurvePublicKey = VerifyKey(private.public_key())
    elif key_type == "p256":
        private = ec.generate_private_key(ec.SECP256R1())
        pub = private.public_key()
    else:
        raise ValidationError(f"unknown key type {key_type!r} (valid: ed25519, p256)")
    cert = ca.issue(name, role, pub, now=now, days=days)
    paths = TlsIdentity(
        cert_path=out / f"{name}.pem",
        key_path=out / f"{name}.key.pem",
        ca_path=out / CA_CERT_FILE,
        crl_path=out / CRL_FILE,
    )
    _write_private(
        paths.key_path,
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, _encryption(passphrase)
        ),
    )
    paths.cert_path.write_bytes(cert.to_pem())
    paths.ca_path.write_bytes(ca.cert.to_pem())
    paths.crl_path.write_bytes(ca.crl(now=now).to_pem())
    return paths


def _tls_context(
    protocol: int,
    cert_path: str | os.PathLike[str],
    key_path: str | os.PathLike[str],
    ca_path: str | os.PathLike[str],
    password: bytes | None,
    crl_path: str | os.PathLike[str] | None,
) -> ssl.SSLContext:
    ctx = ssl.SSLContext(protocol)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.verify_mode = ssl.CERT_REQUIRED
    # each step names the files it read (never key bytes or the password), so a user sees
    # which of the [tls] paths is wrong
    what = f"certificate {cert_path} / key {key_path}"
    path = cert_path
    try:
        # a callable, so OpenSSL never prompts on a terminal for an encrypted key's passphrase
        ctx.load_cert_chain(str(cert_path), str(key_path), password=lambda: password or b"")
        what, path = f"CA {ca_path}", ca_path
        ctx.load_verify_locations(cafile=str(ca_path))
        if crl_path is not None:
            what, path = f"CRL {crl_path}", crl_path
            ctx.load_verify_locations(cafile=str(crl_path))
            ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    except (OSError, ssl.SSLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if path == cert_path and _encrypted(key_path):
            reason = (
                "the key is encrypted and the passphrase is missing or wrong (set"
                " PUBGUARD_TLS_PASSPHRASE)"
            )
        raise ConfigError(f"cannot build TLS context: {what}: {reason}", path=str(path)) from None
    return ctx


def _encrypted(key_path: str | os.PathLike[str]) -> bool:
    try:
        with open(key_path, "rb") as fh:
            return fh.read(64).startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    except OSError:
        return False


def server_ssl_context(
    cert_path: str | os.PathLike[str],
    key_path: str | os.PathLike[str],
    ca_path: str | os.PathLike[str],
    *,
    password: bytes | None = None,
    crl_path: str | os.PathLike[str] | None = None,
) -> ssl.SSLContext:
    """TLS 1.3 server context that *requires* a client certificate issued by the CA."""
    return _tls_context(ssl.PROTOCOL_TLS_SERVER, cert_path, key_path, ca_path, password, crl_path)


def client_ssl_context(
    cert_path: str | os.PathLike[str],
    key_path: str | os.PathLike[str],
    ca_path: str | os.PathLike[str],
    *,
    password: bytes | None = None,
    crl_path: str | os.PathLike[str] | None = None,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """TLS 1.3 client context presenting our certificate and verifying the server's (hostname
    checked against its SubjectAlternativeName, e.g. ``127.0.0.1`` or ``localhost``)."""
    ctx = _tls_context(ssl.PROTOCOL_TLS_CLIENT, cert_path, key_path, ca_path, password, crl_path)
    ctx.check_hostname = check_hostname
    return ctx
