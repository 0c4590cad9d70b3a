"""A client of a running cluster from its state folder alone, in any profile the broker
serves: what ``pubguard publish`` / ``subscribe`` / ``advertise`` / ``unsubscribe`` use.

Theory of operation
-------------------
Everything a client needs is found in the state folder ``cluster up`` wrote, and none of it
is secret beyond the client's own credentials:

- the broker's address (``cluster.json``) and the profiles it serves (its ``broker.toml``);
  without ``profile`` the client speaks the one profile the broker serves, and must choose
  when it serves several (in a cluster without a key service it speaks plain, which a
  secure broker refuses in one line before anything is sent);
- the client's TLS identity (``<state>/pki/<cert>/``, the certificate of the name before any
  ``/session`` suffix), which authenticates it to the broker and to the key service;
- the key service's address (``cluster.json``, ``"keyservice"``) and the public keys to pin
  (the brokers' ``broker-keys.json``: the MS key, the authority key, the publishers' keys);
- a publisher's publication key, beside its TLS key (:mod:`pubguard.ops.cluster_keys`).

A client on another host (a domain's own machine, docs/deploy.md) has no ``cluster.json``:
it names the broker by URL (``tls://host:port``) and the key service with ``keyservice``, and
its state folder holds only its identity (``pki/<name>/``, as ``identity issue`` wrote it).
The profile must then be named, and the key service's public keys are taken from it over
the authenticated channel (its certificate must chain to the CA and carry the key-service
role).

The client itself is :func:`pubguard.net.client.profiles.connect`: it fetches keys, tokens and
permits from the key service over mutual TLS in the certificate's name and renews them across
key epochs. The profile's identity is the certificate's name (the key service issues in the
caller's own name only); the broker session is the full ``NAME/SESSION`` identity, so two
commands under one certificate never replace each other at the broker.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pubguard.errors import ConfigError, StateError
from pubguard.model import Event
from pubguard.net.client.client import Client
from pubguard.net.client.profiles import CONNECT_PROFILES, connect
from pubguard.net.config import KEYSERVICE_NAME, BrokerConfig, load_broker_config
from pubguard.ops.cluster_keys import narada_credentials, publisher_signing_key
from pubguard.ops.pki import ClusterPki
from pubguard.schemes.registry import BrokerKeys

__all__ = ["advertisements_for", "broker_profile", "connect_cluster_client"]


def _cluster_file(state: Path) -> dict[str, Any]:
    try:
        return json.loads((state / "cluster.json").read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        raise StateError(f"no cluster is running from {state} (pubguard cluster up)") from None


def broker_profile(config: BrokerConfig, profile: str | None) -> str:
    """The profile a client of this broker speaks: ``profile`` if the broker serves it, else
    the one profile it serves; ConfigError (one line) otherwise."""
    served = config.profiles or (config.profile,)
    if profile is None:
        if len(served) == 1:
            return served[0]
        raise ConfigError(
            f"broker {config.name} serves {', '.join(served)}: choose one with --profile",
            key="profile",
        )
    if profile not in served:
        raise ConfigError(
            f"broker {config.name} does not serve profile {profile!r} "
            f"(it serves {', '.join(served)})",
            key="profile",
        )
    return profile


async def connect_cluster_client(
    state: Path,
    broker: str,
    identity: str,
    *,
    profile: str | None = None,
    keyservice: str | None = None,
    durable: bool = False,
    on_reconnect: Callable[[bool], None] | None = None,
) -> Client:
    """A client of ``broker`` of the cluster running from ``state``, as session ``identity``
    (``NAME`` or ``NAME/SESSION``; NAME's certificate), speaking ``profile`` (see
    :func:`broker_profile`) with keys from the cluster's key service. ``broker`` may be a URL
    ``tls://host:port`` and ``keyservice`` the key service's (see the module docstring).
    ConfigError when the profile needs a key service the cluster does not run."""
    if broker.startswith("tls://"):
        return await _connect_remote(
            state, broker, identity, profile, keyservice, durable, on_reconnect
        )
    data = _cluster_file(state)
    info = data.get(broker) if broker != KEYSERVICE_NAME else None
    if info is None:
        raise StateError(f"the cluster in {state} has no broker {broker!r}")
    cfg = load_broker_config(info["config"])
    ks = data.get(KEYSERVICE_NAME)
    if profile is None and ks is None and keyservice is None:
        # a cluster without a key service: plain, which a secure broker refuses (one line)
        prof = "plain"
    else:
        prof = broker_profile(cfg, profile)
    if prof not in CONNECT_PROFILES:
        raise ConfigError(f"profile {prof!r} is not served by the key service", key="profile")
    cert = identity.split("/", 1)[0]
    pki = ClusterPki(state / "pki")
    ctx = pki.client_context(cert)
    url = f"tls://{cfg.host}:{info['port']}"
    opts: dict[str, Any] = {"durable": durable, "on_reconnect": on_reconnect}
    if prof == "plain":
        return await connect(url, identity=identity, profile="plain", ssl=ctx, **opts)
    if keyservice is not None:
        ks = {"url": keyservice, "profiles": [prof]}
    if ks is None or prof not in ks.get("profiles", ()):
        raise ConfigError(
            f"no key service of {state} serves profile {prof!r} (add [keyservice] to the "
            "cluster config: docs/deploy.md)",
            key="profile",
        )
    keys = BrokerKeys.load(cfg.keys) if cfg.keys is not None else BrokerKeys()
    if prof == "narada":  # the TLS identity is the narada entity; the brokers' KMC pinned
        opts.update(narada_credentials(pki, cert), kmc_certs=keys.kmc_certs)
    return await connect(
        url,
        identity=identity,
        profile=prof,
        keyservice=str(ks["url"]),
        ssl=ctx,
        **{"signing_key": publisher_signing_key(pki.root, cert), **opts},
        publisher_keys=keys.publishers,
        ms_key=keys.ms_key,
        authority_key=keys.authority_key,
        max_delay=keys.max_delay,
    )


def advertisements_for(profile: str, events: Iterable[Event]) -> list[str]:
    """What a one-shot publisher must advertise before it publishes ``events``: under
    eventguard, each topic it publishes on (eventguard.txt §4.3: the MS issues the publication
    key and the advertisement permit for topic ``w`` on advertisement); nothing elsewhere."""
    if profile != "eventguard":
        return []
    topics = dict.fromkeys(str(e.attrs["topic"]) for e in events if "topic" in e.attrs)
    return [f"topic = {json.dumps(t)}" for t in topics]


async def _connect_remote(
    state: Path,
    url: str,
    identity: str,
    profile: str | None,
    keyservice: str | None,
    durable: bool,
    on_reconnect: Callable[[bool], None] | None,
) -> Client:
    if profile is None:
        raise ConfigError(f"a broker given by URL ({url}) needs --profile", key="profile")
    if profile != "plain" and keyservice is None:
        raise ConfigError(
            f"profile {profile!r} at {url} needs --keyservice tls://host:port", key="keyservice"
        )
    if profile not in CONNECT_PROFILES:
        raise ConfigError(f"profile {profile!r} is not served by the key service", key="profile")
    cert = identity.split("/", 1)[0]
    pki = ClusterPki(state / "pki")
    opts: dict[str, Any] = {}
    if profile == "narada":  # the TLS identity is the narada entity (narada §IV-A)
        opts = narada_credentials(pki, cert)
    elif profile != "plain":
        opts["signing_key"] = publisher_signing_key(pki.root, cert)
    return await connect(
        url,
        identity=identity,
        profile=profile,
        keyservice=keyservice if profile != "plain" else None,
        ssl=pki.client_context(cert),
        durable=durable,
        on_reconnect=on_reconnect,
        **opts,
    )
