"""A broker process's Hermes profiles: join the key groups, poll for rekeys, learn the
neighbours' credentials (hermes-encrypted-access-control.txt §3.4, §4, Fig. 4).

Theory of operation
-------------------
A broker that serves ``hermes-event`` or ``hermes-attribute`` reads ``<state_dir>/hermes.json``
(public material only, written by whoever deploys it):

.. code-block:: json

    {"kgm": {"host": "127.0.0.1", "port": 4711}, "poll": 0.5,
     "type": <signed secure event type>, "capabilities": [<this broker's capabilities>]}

At start it presents its capability to the key-group manager
(:mod:`pubguard.net.keyservice.hermes_kgm`) over mutual TLS with its own broker certificate
and keeps the ``Welcome`` in memory only (group keys never reach the disk). A refusal (no or
a bad capability) is logged and the broker runs *unauthorised*: it routes the type's
ciphertext by type id (§3.3). A :class:`HermesPoller` thread then asks the manager every
``poll`` seconds for the broadcasts after the ones it has (refreshes on join, leave, timer
and expiry, Fig. 5) and for which of its tree neighbours it still admits.

The credential handshake of §3.4 happens on every broker link: each side's ``hello``
(``pubguard.wire.envelope``) carries the capabilities it holds (:func:`hermes_greeting`),
and the other side verifies them against the type owner's key (:meth:`HermesPoller.presented`,
the peer's name already checked against its certificate); what they grant decides what the
plaintext cache carries on that hop. Each poll re-checks them (validity) and withdraws the
cache from a neighbour the manager no longer admits (revoked or expired). The nonce
counter lives in ``<state_dir>/hermes.db`` (SQLite), so sealing never repeats a nonce after a
restart (§3.5), and so does the wire-id secret ``S``, sealed under a key derived from the
broker's TLS identity key (:func:`wire_secret_storage_key`,
:mod:`pubguard.schemes.hermes.wire_secret`), so an event keeps its wire id across a restart.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Final

from pubguard.crypto import SecretBytes, hkdf
from pubguard.crypto.keyfile import load_signing_key
from pubguard.crypto.x509 import client_ssl_context
from pubguard.errors import ConfigError, PubguardError, ValidationError
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.net.tls import tls_password
from pubguard.schemes.hermes import (
    HERMES_ATTRIBUTE,
    HERMES_EVENT,
    BrokerKeyring,
    Capability,
    HermesBroker,
    NonceCounter,
    SecureEventType,
)
from pubguard.schemes.hermes.kgm_wire import rekey_from_wire, welcome_from_wire
from pubguard.schemes.hermes.wire_secret import load_wire_secret
from pubguard.store import Database

__all__ = [
    "HERMES_FILE",
    "HERMES_PROFILES",
    "HermesPoller",
    "hermes_greeted",
    "hermes_greeting",
    "hermes_pollers",
    "wire_secret_storage_key",
    "write_hermes_file",
]

HERMES_FILE: Final = "hermes.json"
HERMES_PROFILES: Final = (HERMES_EVENT, HERMES_ATTRIBUTE)
DEFAULT_POLL: Final = 1.0  # seconds between two asks to the key-group manager
#: seconds ``HermesPoller.stop`` waits for a poll in flight (a call to the manager) to end
STOP_WAIT: Final = 5.0
_WIRE_STORAGE_INFO: Final = b"pubguard/hermes/wire-id-storage/"

log = logging.getLogger("pubguard.hermes")


def write_hermes_file(
    state_dir: Path,
    *,
    kgm: tuple[str, int],
    stype: SecureEventType | None,
    capabilities: list[Capability],
    poll: float = DEFAULT_POLL,
) -> Path:
    """Write a broker's ``hermes.json`` (public material: the signed type, its capabilities).
    A broker the owner authorises for nothing gets no type (``stype`` None): it routes by
    type id and never learns the type's name (§2.1)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    caps = []
    for c in capabilities:
        w = c.to_wire()
        caps.append({**w, "type_id": w["type_id"].hex(), "sig": w["sig"].hex()})
    data = {
        "kgm": {"host": kgm[0], "port": kgm[1]},
        "poll": poll,
        "type": None if stype is None else stype.to_json(),
        "capabilities": caps,
    }
    path = state_dir / HERMES_FILE
    path.write_text(json.dumps(data, indent=1))
    return path


def _load(path: Path) -> tuple[dict[str, Any], SecureEventType | None, list[Capability]]:
    try:
        data = json.loads(path.read_text())
        t = data.get("type")
        stype = None if t is None else SecureEventType.from_json(t)
        caps = [
            Capability.from_wire(
                {**c, "type_id": bytes.fromhex(c["type_id"]), "sig": bytes.fromhex(c["sig"])}
            )
            for c in data.get("capabilities", [])
        ]
    except FileNotFoundError:
        raise ConfigError("serving a hermes profile needs hermes.json", path=str(path)) from None
    except (ValueError, KeyError, TypeError, PubguardError) as exc:
        raise ConfigError(f"bad hermes.json ({type(exc).__name__})", path=str(path)) from None
    return data, stype, caps


class HermesPoller:
    """Joins the key groups once, then polls the manager from a daemon thread (see module)."""

    def __init__(
        self,
        name: str,
        scheme: HermesBroker,
        client: KeyServiceClient,
        *,
        neighbours: list[str],
        poll: float,
    ) -> None:
        self.name, self.scheme, self.client = name, scheme, client
        self.neighbours, self.poll = neighbours, poll
        self._stop = threading.Event()
        self._refusals = 0
        #: neighbour -> the capabilities it presented in its link ``hello`` (§3.4)
        self._presented: dict[str, list[Capability]] = {}
        self._members: frozenset[str] | None = None  # neighbours the manager still admits
        self._thread = threading.Thread(target=self._run, name=f"hermes-{name}", daemon=True)

    def join(self) -> bool:
        caps = self.scheme.credentials()
        if not caps:
            log.warning("hermes: %s holds no capability: routing by type only", self.name)
            return False
        try:
            ok = self.client.call("hermes_join", profile=self.scheme.profile, cap=caps[0].to_wire())
        except PubguardError as exc:
            if not self._refusals:  # logged once; retried every poll
                log.warning("hermes: %s not admitted to the key groups (%s)", self.name, exc)
            self._refusals += 1
            return False
        ring = self.scheme.keyring
        ring.welcome({g: welcome_from_wire(w) for g, w in ok["welcomes"].items()})
        ring.apply(rekey_from_wire(r) for r in ok.get("rekeys", ()))
        log.info("hermes: %s joined %d key group(s)", self.name, len(ok["welcomes"]))
        return True

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = STOP_WAIT) -> None:
        """Stop polling: the node's (or cluster's) shutdown calls it. The thread ends at once
        between polls, or after a call to the manager in flight, and closes its connection;
        this waits at most ``timeout`` seconds for that (0: signal only, for an event loop
        that must not block, as the manager may be slow to answer). Idempotent."""
        self._stop.set()
        if timeout > 0 and self._thread.is_alive():
            if self._thread is not threading.current_thread():
                self._thread.join(timeout)
        if not self._thread.is_alive():
            with contextlib.suppress(Exception):
                self.client.close()

    def presented(self, peer: str, blobs: list[bytes], *, now: float) -> int:
        """The credential handshake of §3.4: ``peer`` presented ``blobs`` (its capabilities)
        in its link ``hello``; this broker verifies them itself against the type owner's key
        and from now on sends that neighbour the cache they grant. Returns how many it
        accepted. A neighbour the manager has evicted (revoked, expired) gets nothing."""
        caps = []
        for b in blobs:
            try:
                caps.append(Capability.from_bytes(b))
            except ValidationError:
                log.info("hermes: %s presented a malformed capability", peer)
        self._presented[peer] = caps
        if self._members is not None and peer not in self._members:
            caps = []
        n = self.scheme.learn_neighbour(peer, caps, now=now)
        log.info("hermes: neighbour %s presented %d capabilities, %d accepted", peer, len(blobs), n)
        return n

    def poll_once(self) -> None:
        ring = self.scheme.keyring
        since = ring.seqs()
        if not since and self.scheme.credentials():
            self.join()  # not (or no longer) a member: ask again, the manager decides
        elif since:
            ok = self.client.call("hermes_rekeys", profile=self.scheme.profile, since=since)
            ring.apply(rekey_from_wire(r) for r in ok["rekeys"])
        # the neighbours' credentials come from the link handshake (``presented``); the
        # manager says which of them it still admits (an evicted one gets no cache), and each
        # poll re-checks the presented capabilities' validity
        ok = self.client.call(
            "hermes_neighbours", profile=self.scheme.profile, names=self.neighbours
        )
        caps_of = ok["caps"]
        self._members = frozenset(p for p in self.neighbours if caps_of.get(p))
        now = time.time()
        for peer, caps in list(self._presented.items()):
            admitted = peer in self._members
            self.scheme.learn_neighbour(peer, caps if admitted else [], now=now)

    def _run(self) -> None:
        away = False  # logged once per outage, not once per poll
        while not self._stop.wait(self.poll):
            try:
                self.poll_once()
            except PubguardError as exc:  # the manager is away: keep the keys we have
                if not away:
                    log.warning(
                        "hermes: %s cannot reach the key-group manager (%s); keeping the keys"
                        " it has and polling every %.1f s",
                        self.name,
                        type(exc).__name__,
                        self.poll,
                    )
                away = True
                continue
            if away:
                log.warning("hermes: %s reached the key-group manager again", self.name)
            away = False
        with contextlib.suppress(Exception):
            self.client.close()


def wire_secret_storage_key(tls_key: Path, name: str) -> SecretBytes:
    """The key sealing this broker's wire-id secret ``S`` in ``hermes.db``
    (:mod:`pubguard.schemes.hermes.wire_secret`): ``HKDF-SHA256(TLS identity key,
    "pubguard/hermes/wire-id-storage/" || name)``. The identity key is read as every TLS
    context here reads it (PKCS#8, encrypted with ``PUBGUARD_TLS_PASSPHRASE`` when set), so
    ``S`` at rest is exactly as protected as the broker's identity. ConfigError (one line) if
    the key cannot be opened or is not Ed25519 (the cluster's identities are)."""
    sk = load_signing_key(tls_key, tls_password())
    return SecretBytes(hkdf(sk.private_bytes(), info=_WIRE_STORAGE_INFO + name.encode()))


def hermes_pollers(
    profiles: tuple[str, ...],
    *,
    name: str,
    state_dir: Path,
    tls: Any,
    neighbours: list[str],
) -> list[HermesPoller]:
    """The Hermes profiles of a broker process, joined and polling: one started
    :class:`HermesPoller` per profile (its ``scheme`` to register; ``stop`` on close)."""
    wanted = [p for p in profiles if p in HERMES_PROFILES]
    if not wanted:
        return []
    if tls is None:
        raise ConfigError("hermes needs mutual TLS to reach its key-group manager", key="tls")
    data, stype, caps = _load(state_dir / HERMES_FILE)
    state_dir.mkdir(parents=True, exist_ok=True)
    db = Database(state_dir / "hermes.db")
    counter = NonceCounter(name, db)
    wire_secret, how = load_wire_secret(
        db, name, wire_secret_storage_key(Path(tls.key), name), now=time.time()
    )
    if how == "replaced":
        log.warning(
            "hermes: %s's kept wire-id secret does not open under its TLS identity key (the"
            " identity was re-issued): a new one is in use, so wire ids change once",
            name,
        )
    else:
        log.info("hermes: %s wire-id secret %s (sealed in hermes.db)", name, how)
    out = []
    for profile in wanted:
        scheme = HermesBroker(
            profile,
            name,
            types=[stype] if stype else [],
            capabilities=caps,
            keyring=BrokerKeyring(name),
            counter=counter,
            wire_id_key=wire_secret,
        )
        ctx = client_ssl_context(
            tls.cert, tls.key, tls.ca, crl_path=tls.crl, password=tls_password()
        )
        kgm = data["kgm"]
        client = KeyServiceClient(str(kgm["host"]), int(kgm["port"]), ctx, server_role="kdc")
        poller = HermesPoller(
            name, scheme, client, neighbours=neighbours, poll=float(data.get("poll", DEFAULT_POLL))
        )
        poller.join()
        with contextlib.suppress(PubguardError):
            poller.poll_once()
        poller.start()
        out.append(poller)
    return out


def hermes_greeting(pollers: list[HermesPoller]) -> list[bytes]:
    """What a broker presents in its link ``hello`` (§3.4): its capabilities, every profile's
    (public: the type owner signed them; the peer verifies them itself)."""
    out: dict[bytes, None] = {}
    for p in pollers:
        for c in p.scheme.credentials():
            out[c.to_bytes()] = None
    return list(out)


def hermes_greeted(pollers: list[HermesPoller], peer: str, blobs: list[bytes]) -> None:
    """A neighbour's ``hello`` arrived (its identity checked against its certificate):
    every Hermes profile learns what it presented."""
    now = time.time()
    for p in pollers:
        p.presented(peer, blobs, now=now)
