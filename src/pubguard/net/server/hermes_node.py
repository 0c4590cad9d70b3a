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
and expiry, Fig. 5) and for the capabilities of its tree neighbours, which it verifies itself
against the type owner's key (§3.4's credential exchange, relayed by the manager). The nonce
counter lives in ``<state_dir>/hermes.db`` (SQLite), so sealing never repeats a nonce after a
restart (§3.5).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Final

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
from pubguard.store import Database

__all__ = ["HERMES_FILE", "HERMES_PROFILES", "HermesPoller", "hermes_schemes", "write_hermes_file"]

HERMES_FILE: Final = "hermes.json"
HERMES_PROFILES: Final = (HERMES_EVENT, HERMES_ATTRIBUTE)
DEFAULT_POLL: Final = 1.0  # seconds between two asks to the key-group manager

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

    def stop(self) -> None:
        self._stop.set()

    def poll_once(self) -> None:
        ring = self.scheme.keyring
        since = ring.seqs()
        if not since and self.scheme.credentials():
            self.join()  # not (or no longer) a member: ask again, the manager decides
        elif since:
            ok = self.client.call("hermes_rekeys", profile=self.scheme.profile, since=since)
            ring.apply(rekey_from_wire(r) for r in ok["rekeys"])
        ok = self.client.call(
            "hermes_neighbours", profile=self.scheme.profile, names=self.neighbours
        )
        now = time.time()
        for peer in self.neighbours:
            try:
                caps = [Capability.from_wire(c) for c in ok["caps"].get(peer, [])]
            except ValidationError:
                caps = []
            self.scheme.learn_neighbour(peer, caps, now=now)

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                self.poll_once()
            except PubguardError as exc:  # the manager is away: keep the keys we have
                log.warning(
                    "hermes: %s cannot reach the key-group manager (%s)",
                    self.name,
                    type(exc).__name__,
                )
        with contextlib.suppress(Exception):
            self.client.close()


def hermes_schemes(
    profiles: tuple[str, ...],
    *,
    name: str,
    state_dir: Path,
    tls: Any,
    neighbours: list[str],
) -> list[HermesBroker]:
    """The Hermes broker schemes of a broker process, joined and polling (see module)."""
    wanted = [p for p in profiles if p in HERMES_PROFILES]
    if not wanted:
        return []
    if tls is None:
        raise ConfigError("hermes needs mutual TLS to reach its key-group manager", key="tls")
    data, stype, caps = _load(state_dir / HERMES_FILE)
    state_dir.mkdir(parents=True, exist_ok=True)
    db = Database(state_dir / "hermes.db")
    counter = NonceCounter(name, db)
    out = []
    for profile in wanted:
        scheme = HermesBroker(
            profile,
            name,
            types=[stype] if stype else [],
            capabilities=caps,
            keyring=BrokerKeyring(name),
            counter=counter,
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
        out.append(scheme)
    return out
