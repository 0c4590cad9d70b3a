"""One entry point for every security profile: ``pubguard.connect``.

::

    async with pubguard.connect(
        "tls://127.0.0.1:7001",
        identity="young-unit",
        profile="default",
        keyservice="tls://127.0.0.1:7400",
        ssl=ctx,                       # the identity's certificate, for broker and key service
    ) as nc:
        sub = await nc.subscribe('topic = "cardiology" && age >= 20 && age <= 30')
        async for delivery in sub:     # opened plaintext events
            print(delivery.event)

Theory of operation
-------------------
:func:`profile_scheme` builds the client face of a profile (a
:class:`~pubguard.schemes.base.ClientScheme`) whose keys, tokens and permits come from the key
service at ``keyservice`` over mutual TLS (:mod:`pubguard.net.keyservice.server`). One
:class:`~pubguard.net.keyservice.client.KeyServiceClient` is opened per client, on first use,
with the same ``ssl`` context that authenticates the client to its broker: the key service
knows the caller from its certificate's common name and serves keys in that name only.

- ``psguard`` / ``psguard-paper``: :class:`~pubguard.schemes.psguard.client.PSGuardClient`
  over :class:`~pubguard.net.keyservice.kdc_client.RemoteKdc` (psguard.txt §3: filter keys
  ``K(f)`` and routing tokens from the KDC, a publisher's own scope keys).
- ``default``: :class:`~pubguard.schemes.default.client.DefaultClient` over
  :class:`~pubguard.net.keyservice.kdc_client.RemoteAuthority` (the KDC plus signed permits).
- ``eventguard``: :class:`~pubguard.schemes.eventguard.client.EventGuardClient` with the
  key-service client as its meta-service (eventguard.txt §3.2: tokens, keys and permits).
- ``narada``: :class:`~pubguard.net.client.narada_remote.RemoteNaradaClient`, tokens and
  topic keys from the KMC the key service hosts (narada-secure-delivery.txt §IV-E,
  :mod:`pubguard.net.keyservice.kmc_service`). Its entity certificate and signing key are the
  identity's TLS certificate and key (``certificate=``, ``signing_key=``: the cluster CA is
  narada's CA, §IV-A); ``kmc_certs`` pins the KMC (else taken from the key service's
  ``info``).
- ``plain``: no key service.

Public verification keys. The MS key (eventguard) and the authority key (default) are taken
from the key service's ``info`` answer, unless passed as ``ms_key`` / ``authority_key`` (pin
them when they are distributed out of band). Taking them from ``info`` is safe because the
channel is authenticated: the key service's certificate must chain to the CA of ``ssl`` and
carry the key-service role (``ms``), or the connection is refused before any request; every
permit that comes back is then checked against that key before it is used.

Publisher signing keys. psguard brokers check every record's signature against the publisher
keys they were given up front (:class:`~pubguard.schemes.registry.BrokerKeys` ``publishers``,
written by the deployment), so a psguard publisher must pass the ``signing_key`` registered
there; without one it can subscribe but not publish. The default and eventguard permits bind
the publisher's key, so there a fresh key is made when none is given. A psguard subscriber
may pass ``publisher_keys`` to check publishers' signatures as well (the AEAD under ``K(e)``
already authenticates the content to holders of the key).

Key epochs are renewed by the client as always (:mod:`pubguard.net.client.renewal`); the
schemes fetch the next epoch's keys from the key service when it is due.

:func:`connect` returns a :class:`Connecting`: await it for the client, or use it in
``async with`` (which also closes the client and its key-service connection).
"""

from __future__ import annotations

import ssl as _ssl
from collections.abc import Generator, Iterable, Mapping
from typing import Any, Final

from pubguard.crypto import SigningKey, VerifyKey
from pubguard.crypto.x509 import Certificate
from pubguard.errors import ConfigError, ValidationError
from pubguard.net.client.client import Client, parse_url
from pubguard.net.client.narada_remote import RemoteNaradaClient
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.net.keyservice.kdc_client import RemoteAuthority, RemoteKdc
from pubguard.schemes.base import ClientScheme
from pubguard.schemes.common.guards import DEFAULT_MAX_DELAY
from pubguard.schemes.default.client import DefaultClient
from pubguard.schemes.eventguard.client import EventGuardClient
from pubguard.schemes.plain import PlainScheme
from pubguard.schemes.psguard.client import PSGuardClient

__all__ = [
    "KEYSERVICE_PROFILES",
    "Connecting",
    "KeyedClient",
    "connect",
    "profile_scheme",
]

#: the profiles :func:`connect` speaks with keys from a key service
KEYSERVICE_PROFILES: Final = ("psguard", "psguard-paper", "eventguard", "default", "narada")
#: every profile :func:`connect` speaks
CONNECT_PROFILES: Final = ("plain", *KEYSERVICE_PROFILES)


def _check_profile(profile: str) -> None:
    if profile not in CONNECT_PROFILES:
        raise ConfigError(
            f"unknown profile {profile!r} (known: {', '.join(CONNECT_PROFILES)})", key="profile"
        )


def keyservice_client(
    keyservice: str, ssl: _ssl.SSLContext, *, ms_key: VerifyKey | None = None
) -> KeyServiceClient:
    """A (lazily connected) key-service client for ``tls://host:port``, authenticated by
    ``ssl``'s certificate; the server must present a certificate of the key-service role."""
    use_tls, host, port = parse_url(keyservice)
    if not use_tls:
        raise ConfigError(
            "the key service is reached over mutual TLS only (tls://)", key="keyservice"
        )
    return KeyServiceClient(host, port, ssl, ms_key=ms_key)


def profile_scheme(
    profile: str,
    identity: str,
    *,
    keyservice: KeyServiceClient | None,
    signing_key: SigningKey | None = None,
    publisher_keys: Mapping[str, VerifyKey] | None = None,
    authority_key: VerifyKey | None = None,
    max_delay: float = DEFAULT_MAX_DELAY,
    certificate: Certificate | None = None,
    kmc_certs: Iterable[Certificate] = (),
) -> ClientScheme:
    """The client face of ``profile`` for ``identity`` (the name of the certificate that
    ``keyservice`` authenticates with), its keys fetched from ``keyservice``. See the module
    docstring; ConfigError for an unknown profile, a missing key service, or narada without
    the identity's certificate and key."""
    _check_profile(profile)
    if profile == "plain":
        return PlainScheme()
    if keyservice is None:
        raise ConfigError(
            f"profile {profile!r} needs a key service (keyservice=)", key="keyservice"
        )
    match profile:
        case "psguard" | "psguard-paper":
            return PSGuardClient(
                identity,
                RemoteKdc(keyservice),  # type: ignore[arg-type]  # the KDC's client interface
                signing_key=signing_key,
                publisher_keys=publisher_keys,
                profile=profile,
                max_delay=max_delay,
            )
        case "eventguard":
            return EventGuardClient(identity, keyservice, signing_key=signing_key)
        case "narada":
            if certificate is None or signing_key is None:
                raise ConfigError(
                    "profile 'narada' needs the identity's TLS certificate and key "
                    "(certificate=, signing_key=)",
                    key="certificate",
                )
            return RemoteNaradaClient(signing_key, certificate, keyservice, kmc_certs=kmc_certs)
        case _:
            return DefaultClient(
                identity,
                RemoteAuthority(keyservice, authority_key=authority_key),  # type: ignore[arg-type]
                signing_key=signing_key,
                max_delay=max_delay,
            )


class KeyedClient(Client):
    """A :class:`~pubguard.net.client.client.Client` that owns its key-service connection and
    closes it with the broker link."""

    def __init__(self, *args: Any, keyservice: KeyServiceClient | None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.keyservice = keyservice

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            if self.keyservice is not None:
                self.keyservice.close()


class Connecting:
    """What :func:`connect` returns: ``await`` it for the connected client, or enter it with
    ``async with`` (the client is closed on exit). Awaited or entered once."""

    __slots__ = ("_client", "_started")

    def __init__(self, client: KeyedClient) -> None:
        self._client = client
        self._started = False

    def __repr__(self) -> str:
        return f"Connecting({self._client.identity!r}, {self._client.scheme.profile!r})"

    async def _start(self) -> KeyedClient:
        if self._started:
            raise ValidationError("a connect() result is awaited or entered once")
        self._started = True
        try:
            await self._client._start()
        except BaseException:
            await self._client.close()
            raise
        return self._client

    def __await__(self) -> Generator[Any, None, KeyedClient]:
        return self._start().__await__()

    async def __aenter__(self) -> KeyedClient:
        return await self._start()

    async def __aexit__(self, *exc: object) -> None:
        await self._client.close()


def connect(
    url: str,
    *,
    identity: str,
    profile: str = "default",
    keyservice: str | None = None,
    ssl: _ssl.SSLContext | None = None,
    signing_key: SigningKey | None = None,
    publisher_keys: Mapping[str, VerifyKey] | None = None,
    ms_key: VerifyKey | None = None,
    authority_key: VerifyKey | None = None,
    max_delay: float = DEFAULT_MAX_DELAY,
    certificate: Certificate | None = None,
    kmc_certs: Iterable[Certificate] = (),
    **options: Any,
) -> Connecting:
    """A client of the broker at ``url`` (``tls://host:port``) speaking ``profile`` as
    ``identity``, with keys, tokens and permits from the key service at ``keyservice``
    (``tls://host:port``; not needed for ``plain``). ``ssl``: the client context of
    ``identity``'s certificate (``client_ssl_context``); it authenticates the client to the
    broker and to the key service. ``signing_key``: a publisher's Ed25519 key (psguard: the
    one its brokers know). ``ms_key`` / ``authority_key``: pin the key service's public keys
    (otherwise taken from it over the authenticated channel). ``max_delay``: the brokers'
    timestamp window. narada: ``certificate`` and ``signing_key`` are the identity's TLS
    certificate and key; ``kmc_certs`` pins the KMC. ``options``: as for :func:`pubguard.net.client.client.connect`
    (``durable``, ``window``, ``reconnect``, ``batch_sign``, ``renew_grace``, ...).

    ``identity`` may be a session ``NAME/SESSION`` of certificate ``NAME``: the broker keeps it
    as one session (two processes under one certificate never replace each other), and the
    profile acts as ``NAME``, since the key service issues keys, tokens and permits in the
    authenticated certificate's name only.

    Everything is checked before any connection is made (ConfigError, ValidationError);
    ``await`` or ``async with`` the result to connect (TransportError if refused)."""
    _check_profile(profile)
    use_tls, host, port = parse_url(url)
    if use_tls and ssl is None:
        raise ValidationError("a tls:// URL needs an ssl context (client_ssl_context(...))")
    ks = None
    if profile != "plain":
        if keyservice is None:
            raise ConfigError(
                f"profile {profile!r} needs a key service (keyservice='tls://host:port')",
                key="keyservice",
            )
        if ssl is None:
            raise ConfigError("the key service needs the identity's ssl context", key="ssl")
        ks = keyservice_client(keyservice, ssl, ms_key=ms_key)
    scheme = profile_scheme(
        profile,
        identity.split("/", 1)[0],  # the certificate's name (see above)
        keyservice=ks,
        signing_key=signing_key,
        publisher_keys=publisher_keys,
        authority_key=authority_key,
        max_delay=max_delay,
        certificate=certificate,
        kmc_certs=kmc_certs,
    )
    if profile != "plain":  # an old generation lasts as long as the brokers' timestamp window
        options.setdefault("renew_grace", max_delay)
    client = KeyedClient(
        host,
        port,
        identity=identity,
        ssl=ssl if use_tls else None,
        scheme=scheme,
        keyservice=ks,
        **options,
    )
    return Connecting(client)
