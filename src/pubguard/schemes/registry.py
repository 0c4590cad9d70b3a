"""Every profile by name: client and broker faces built from one key-service bundle.

Theory of operation
-------------------
The CLI, the demo and ``bench network --profile`` instantiate profiles by name. Two objects
carry what they need:

- :class:`KeyBundle` (trusted side, in memory only): the deployment's schema and policy, the
  PSGuard KDC / default authority master, EventGuard's meta-service, and Narada's CA, KMC and
  topic owner (created on first use in a directory, the CA key sealed under a passphrase).
  :meth:`KeyBundle.client` returns the :class:`~pubguard.schemes.base.ClientScheme` of any
  profile for one identity, fetching its keys from the services (narada: certificate, KMC
  authorisation and key delivery for the topics it names).
- :class:`BrokerKeys` (public material only: verify keys, certificates, CRL, revoked keys):
  what a broker needs. It round-trips through JSON (:meth:`BrokerKeys.save` /
  :meth:`BrokerKeys.load`) so broker processes can read it from their state directory, and
  :func:`build_registry` turns it into a :class:`~pubguard.schemes.base.SchemeRegistry`.

Brokers never see the bundle: a registry built from :class:`BrokerKeys` holds no secret.
"""

from __future__ import annotations

import base64
import json
import random as _random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pubguard.crypto import KemPrivateKey, SecretBytes, SigningKey, VerifyKey, hkdf, random_bytes
from pubguard.crypto.x509 import (
    CA_CERT_FILE,
    Certificate,
    CertificateAuthority,
    RevocationList,
    Role,
)
from pubguard.errors import ConfigError, ValidationError
from pubguard.keys.kmc import KMC, Authorize, RegisterTopic, Rights
from pubguard.keys.ms import MetaService
from pubguard.model import AttributeSpec, EventType, Filter
from pubguard.schemes.base import BrokerScheme, ClientScheme, SchemeRegistry
from pubguard.schemes.common.guards import DEFAULT_MAX_DELAY
from pubguard.schemes.common.replay import ReplayState
from pubguard.schemes.default.broker import DefaultBroker
from pubguard.schemes.default.client import DefaultAuthority, DefaultClient
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.schemes.eventguard.client import EventGuardClient, MetaServiceLike
from pubguard.schemes.narada.broker import NaradaBroker
from pubguard.schemes.narada.client import NaradaClient
from pubguard.schemes.plain import PlainScheme
from pubguard.schemes.psguard.broker import PSGuardBroker
from pubguard.schemes.psguard.client import PSGuardClient
from pubguard.schemes.psguard.keyservice import PSGuardKeyService
from pubguard.schemes.psguard.record import Schema
from pubguard.schemes.vcaps.broker import VcapsBroker
from pubguard.schemes.vcaps.deployment import VcapsDeployment
from pubguard.schemes.vcaps.publisher import PROFILES as VCAPS_PROFILES
from pubguard.store import Database

__all__ = [
    "HOSPITAL",
    "PROFILES",
    "BrokerKeys",
    "KeyBundle",
    "build_registry",
    "make_broker_scheme",
    "make_profile",
]

#: ``psguard-paper``: the psguard records with psguard.txt §2's honest-but-curious brokers
#: (tokens matched, no signature or timestamp check at brokers; subscribers verify)
PROFILES: Final = (
    "plain",
    "psguard",
    "psguard-paper",
    "eventguard",
    "narada",
    "default",
    *VCAPS_PROFILES,
)
#: psguard.txt §1: a hospital publishing <topic, age, patientRecord> events.
HOSPITAL: Final = EventType(
    "patient",
    (
        AttributeSpec("topic", "str", kind="topic"),
        AttributeSpec("age", "int", range_size=128, least_count=1),
        AttributeSpec("patientRecord", "str", routable=False),
    ),
)
_CA_PASS: Final = b"pubguard-bundle-ca"  # the demo CA's key file passphrase (a local demo CA)
_DAY: Final = 86_400.0


def _check(profile: str) -> str:
    if profile not in PROFILES:
        raise ConfigError(
            f"unknown profile {profile!r} (known: {', '.join(PROFILES)})", key="profile"
        )
    return profile


# -- public material for brokers --------------------------------------------------------------


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _unb64(s: Any, what: str) -> bytes:
    if not isinstance(s, str):
        raise ConfigError(f"broker keys: {what} must be base64 text", key=what)
    try:
        return base64.b64decode(s, validate=True)
    except ValueError:
        raise ConfigError(f"broker keys: {what} is not base64", key=what) from None


@dataclass(frozen=True, slots=True)
class BrokerKeys:
    """What brokers of every profile need: public keys, certificates and revocations only."""

    publishers: Mapping[str, VerifyKey] = field(default_factory=dict)  # psguard record keys
    authority_key: VerifyKey | None = None  # default profile
    ms_key: VerifyKey | None = None  # eventguard
    ca_cert: Certificate | None = None  # narada (and CRL checks of the default profile)
    kmc_certs: tuple[Certificate, ...] = ()
    crl: RevocationList | None = None
    revoked: frozenset[bytes] = frozenset()  # revoked publisher keys (eventguard, default, psguard)
    max_delay: float = DEFAULT_MAX_DELAY

    def to_json(self) -> dict[str, Any]:
        return {
            "publishers": {n: _b64(k.to_bytes()) for n, k in sorted(self.publishers.items())},
            "authority_key": _b64(self.authority_key.to_bytes()) if self.authority_key else None,
            "ms_key": _b64(self.ms_key.to_bytes()) if self.ms_key else None,
            "ca_cert": self.ca_cert.to_pem().decode() if self.ca_cert else None,
            "kmc_certs": [c.to_pem().decode() for c in self.kmc_certs],
            "crl": self.crl.to_pem().decode() if self.crl else None,
            "revoked": sorted(_b64(k) for k in self.revoked),
            "max_delay": self.max_delay,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BrokerKeys:
        try:

            def vk(v: Any, what: str) -> VerifyKey | None:
                return None if v is None else VerifyKey.from_bytes(_unb64(v, what))

            return cls(
                {
                    str(n): VerifyKey.from_bytes(_unb64(k, f"publishers.{n}"))
                    for n, k in dict(d.get("publishers", {})).items()
                },
                vk(d.get("authority_key"), "authority_key"),
                vk(d.get("ms_key"), "ms_key"),
                Certificate.from_pem(d["ca_cert"].encode()) if d.get("ca_cert") else None,
                tuple(Certificate.from_pem(c.encode()) for c in d.get("kmc_certs", [])),
                RevocationList.from_pem(d["crl"].encode()) if d.get("crl") else None,
                frozenset(_unb64(k, "revoked") for k in d.get("revoked", [])),
                float(d.get("max_delay", DEFAULT_MAX_DELAY)),
            )
        except (ValidationError, TypeError, ValueError, AttributeError, KeyError) as exc:
            raise ConfigError(f"broker keys: invalid ({type(exc).__name__}: {exc})") from None

    def save(self, path: Path | str) -> None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1))
        tmp.replace(p)

    @classmethod
    def load(cls, path: Path | str) -> BrokerKeys:
        try:
            return cls.from_json(json.loads(Path(path).read_text()))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}", path=str(path)) from None
        except ValueError:
            raise ConfigError(f"{path}: not JSON", path=str(path)) from None


def make_broker_scheme(
    profile: str,
    keys: BrokerKeys,
    *,
    now: float,
    db: Database | None = None,
    deferred: bool = False,
    batch_verify: bool = True,
) -> BrokerScheme:
    """The broker face of ``profile``. ``db``: where replay state lives (narada, default), so a
    restarted broker keeps refusing replays; None keeps it in memory. ``deferred``: ``db`` is
    the broker's own state database, written in its batch transactions (``ReplayState``).
    ``batch_verify``: eventguard, narada and default native guards try a run's signatures as
    one Ed25519 batch (off: one verification per signature)."""
    match _check(profile):
        case "plain":
            return PlainScheme()
        case "vcaps-rv" | "vcaps-srv" | "vcaps-srv-fast":
            return VcapsBroker(profile, keys.publishers)  # publishers' token/notification keys
        case "psguard" | "psguard-paper":
            ps = PSGuardBroker(
                keys.publishers,
                max_delay_ms=int(keys.max_delay * 1000),
                verify="signature" if profile == "psguard" else "none",
            )
            for k in keys.revoked:
                ps.revoke(k)
            return ps
        case "eventguard":
            if keys.ms_key is None:
                raise ConfigError("eventguard brokers need the MS public key", key="ms_key")
            return EventGuardBroker(
                keys.ms_key,
                max_delay=keys.max_delay,
                revoked=keys.revoked,
                batch_verify=batch_verify,
            )
        case "narada":
            if keys.ca_cert is None:
                raise ConfigError("narada brokers need the CA certificate", key="ca_cert")
            return NaradaBroker(
                ca_cert=keys.ca_cert,
                kmc_certs=keys.kmc_certs,
                now=now,
                crl=keys.crl,
                max_delay=keys.max_delay,
                replay=ReplayState(db, deferred=deferred),
                batch_verify=batch_verify,
            )
        case _:
            if keys.authority_key is None:
                raise ConfigError("default brokers need the authority key", key="authority_key")
            return DefaultBroker(
                keys.authority_key,
                max_delay=keys.max_delay,
                revoked=keys.revoked,
                ca_cert=keys.ca_cert,
                crl=keys.crl if keys.ca_cert else None,
                now=now,
                replay=ReplayState(db, deferred=deferred),
                batch_verify=batch_verify,
            )


def build_registry(
    profiles: Iterable[str],
    keys: BrokerKeys,
    *,
    now: float,
    state_dir: Path | str | None = None,
    replay_db: Database | None = None,
) -> SchemeRegistry:
    """A registry with the broker face of every named profile. The replay state of narada and
    default: with ``replay_db`` (the broker's own state database) in its batch transactions;
    else with ``state_dir`` in ``<state_dir>/replay.db`` (one database, scoped); else in
    memory."""
    db = replay_db
    names = list(dict.fromkeys(profiles))
    if db is None and state_dir is not None and {"narada", "default"} & set(names):
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        db = Database(Path(state_dir) / "replay.db")
    return SchemeRegistry(
        make_broker_scheme(p, keys, now=now, db=db, deferred=replay_db is not None) for p in names
    )


# -- the trusted bundle -------------------------------------------------------------------------


@dataclass(slots=True)
class _NaradaPki:
    ca: CertificateAuthority
    kmc: KMC
    kmc_cert: Certificate
    owner: tuple[Certificate, SigningKey]
    topics: set[str]
    entities: dict[str, tuple[Certificate, SigningKey]]


class KeyBundle:
    """The key services of one deployment (trusted; never written to disk in clear).

    ``state_dir``: where Narada's CA lives (created on first use). ``master``: the secret the
    PSGuard KDC / default authority and EventGuard's MS derive from (random if omitted).
    ``subscribers`` / ``publishers``: the PSGuard / default policy (None: allow all).
    ``epoch_length`` / ``origin``: key epochs of the KDC, the authority and the MS.
    ``identities``: names that get a publisher signing key up front (psguard brokers must know
    every publisher's key; more can be added with :meth:`signing_key` before
    :meth:`broker_keys` is taken)."""

    def __init__(
        self,
        state_dir: Path | str,
        *,
        now: float,
        types: Sequence[EventType] = (HOSPITAL,),
        master: SecretBytes | bytes | None = None,
        subscribers: Mapping[str, Iterable[Filter | str]] | None = None,
        publishers: Mapping[str, Iterable[str]] | None = None,
        identities: Iterable[str] = (),
        epoch_length: float = 30 * _DAY,
        origin: float = 0.0,
        max_delay: float = DEFAULT_MAX_DELAY,
        rng: _random.Random | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.now = now
        self.rng = rng
        m = SecretBytes(master if master is not None else random_bytes(32, rng))
        self.schema = Schema(types)
        self.max_delay = max_delay
        self.authority = DefaultAuthority(
            m,
            self.schema,
            subscribers=subscribers,
            publishers=publishers,
            epoch_length=epoch_length,
            origin=origin,
        )
        self.psguard: PSGuardKeyService = self.authority.keys  # one KDC for both profiles
        self.ms = MetaService(
            SecretBytes(hkdf(m, info=b"pubguard/bundle/ms")),
            epoch_length=epoch_length,
            origin=origin,
        )
        self._keys: dict[str, SigningKey] = {}
        self._narada: _NaradaPki | None = None
        #: where an eventguard client gets its MS: ``ms_for(identity)`` (e.g. a key-service
        #: proxy authenticated as that identity); None uses the in-process :attr:`ms`
        self.ms_for: Callable[[str], MetaServiceLike] | None = None
        for n in identities:
            self.signing_key(n)
        #: v-CAPS key service and publisher cores (``identities`` should name the publishers)
        self.vcaps = VcapsDeployment(
            hkdf(m, info=b"pubguard/bundle/vcaps"),
            signing_key=self.signing_key,
            publisher_names=lambda: list(self._keys),
            epoch_length=epoch_length,
            origin=origin,
            rng=rng,
        )

    def __repr__(self) -> str:
        return f"KeyBundle({self.state_dir}, identities={sorted(self._keys)})"

    def signing_key(self, identity: str) -> SigningKey:
        """The identity's publication key (created on first use)."""
        sk = self._keys.get(identity)
        if sk is None:
            seed = self.rng.randbytes(32) if self.rng is not None else None
            sk = self._keys[identity] = (
                SigningKey.from_seed(seed) if seed else SigningKey.generate()
            )
        return sk

    def add_signing_key(self, identity: str, key: SigningKey) -> None:
        """Make ``key`` the identity's publication key (a deployment that derives or stores its
        publishers' keys); before :meth:`broker_keys` is taken."""
        self._keys[identity] = key

    # -- narada PKI, on first use ------------------------------------------------------------
    def _pki(self) -> _NaradaPki:
        if self._narada is None:
            d = self.state_dir / "narada-ca"
            if (d / CA_CERT_FILE).exists():
                ca = CertificateAuthority.load(d, passphrase=_CA_PASS)
            else:
                ca = CertificateAuthority.create(
                    "pubguard-ca", d, passphrase=_CA_PASS, now=self.now
                )
            kmc_cert, kmc_key = ca.issue_signing_identity("kmc-1", Role.KMC, now=self.now)
            kmc = KMC(
                Database(":memory:"),
                signing_key=kmc_key,
                cert=kmc_cert,
                ca_cert=ca.cert,
                storage_key=SecretBytes(random_bytes(32, self.rng)),
            )
            owner = ca.issue_signing_identity("topic-owner", Role.CLIENT, now=self.now)
            self._narada = _NaradaPki(ca, kmc, kmc_cert, owner, set(), {})
        return self._narada

    def _narada_entity(self, identity: str, topics: Iterable[str], now: float) -> NaradaClient:
        pki = self._pki()
        ocert, okey = pki.owner
        ent = pki.entities.get(identity)
        if ent is None:
            ent = pki.entities[identity] = pki.ca.issue_signing_identity(
                identity, Role.CLIENT, now=now
            )
        cert, key = ent
        c = NaradaClient(key, cert, kmc_keys={pki.kmc_cert.subject: pki.kmc_cert.verify_key})
        for t in topics:
            if t not in pki.topics:
                pki.kmc.register_topic(
                    RegisterTopic.signed(
                        okey, ocert, topic=t, algorithm="AES-256-GCM", key_bits=256, now=now
                    ),
                    now=now,
                )
                pki.topics.add(t)
            pki.kmc.authorize(
                Authorize.signed(
                    okey,
                    ocert,
                    topic=t,
                    entity=cert.subject,
                    rights=Rights.BOTH,
                    not_before=now - 60,
                    not_after=now + 30 * _DAY,
                    now=now,
                ),
                now=now,
            )
            kem = KemPrivateKey.generate()
            c.install(pki.kmc.request_key(c.key_request(t, kem, now=now), now=now), kem)
        return c

    # -- the two faces -------------------------------------------------------------------------
    def client(
        self, profile: str, identity: str, *, topics: Iterable[str] = (), now: float | None = None
    ) -> ClientScheme:
        """The client face of ``profile`` for ``identity``. ``topics``: the narada topics it
        uses (its KMC token and key are fetched now); other profiles fetch keys on demand."""
        t = self.now if now is None else now
        match _check(profile):
            case "plain":
                return PlainScheme()
            case "vcaps-rv" | "vcaps-srv" | "vcaps-srv-fast":
                return self.vcaps.client(profile, identity)
            case "psguard" | "psguard-paper":
                return PSGuardClient(
                    identity,
                    self.psguard,
                    signing_key=self.signing_key(identity),
                    publisher_keys=self.broker_keys().publishers,
                    profile=profile,
                    max_delay=self.max_delay,
                )
            case "eventguard":
                ms = self.ms_for(identity) if self.ms_for is not None else self.ms
                return EventGuardClient(identity, ms, signing_key=self.signing_key(identity))
            case "narada":
                return self._narada_entity(identity, topics, t)
            case _:
                return DefaultClient(
                    identity,
                    self.authority,
                    signing_key=self.signing_key(identity),
                    max_delay=self.max_delay,
                )

    def revoke(self, identity: str) -> None:
        """Revoke ``identity``'s publication key (eventguard, default, psguard) and, if it has
        a narada certificate, the certificate (CRL). Take :meth:`broker_keys` again afterwards."""
        sk = self.signing_key(identity)
        self.authority.revoke(sk.public)
        if self._narada is not None and identity in self._narada.entities:
            self._narada.ca.revoke(self._narada.entities[identity][0], now=self.now)

    def broker_keys(self, *, narada: bool | None = None) -> BrokerKeys:
        """The public material brokers need (``narada``: include the CA and KMC, creating the
        PKI if needed; default: only when it already exists)."""
        pki = self._pki() if narada else self._narada
        return BrokerKeys(
            publishers={n: k.public for n, k in self._keys.items()},
            authority_key=self.authority.public_key,
            ms_key=self.ms.public_key,
            ca_cert=pki.ca.cert if pki else None,
            kmc_certs=(pki.kmc_cert,) if pki else (),
            crl=pki.ca.crl(now=self.now) if pki else None,
            revoked=frozenset(self.authority.revoked),
            max_delay=self.max_delay,
        )


def make_profile(
    profile: str,
    bundle: KeyBundle,
    identity: str,
    *,
    now: float,
    topics: Iterable[str] = (),
    db: Database | None = None,
) -> tuple[ClientScheme, BrokerScheme]:
    """``(client face for identity, broker face)`` of one profile from one bundle."""
    client = bundle.client(profile, identity, topics=topics, now=now)
    keys = bundle.broker_keys(narada=profile == "narada")
    return client, make_broker_scheme(profile, keys, now=now, db=db)
