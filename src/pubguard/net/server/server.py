"""The broker server: an asyncio + mutual-TLS shell around the sans-IO broker core.

Theory of operation
-------------------
The server owns a :class:`~pubguard.broker.core.Broker` and a set of :class:`~.links.Link`
objects, one per peer (``b:<name>`` for brokers, ``c:<name>`` for clients). Connections come
in on one listening socket (mutual TLS 1.3: the peer's certificate must be issued by the
project CA and name the identity it claims in its ``hello``; hermes §2.4 assumes TLS between
brokers); the link to the parent is dialled by this broker and redialled with back-off.

Reading never stops (so acknowledgements always get through): each connection is a
:class:`~pubguard.net.conn.FrameConnection` whose ``data_received`` decodes frames and calls
:meth:`BrokerServer._on_frames` directly. Reliable messages go to the link's ``inbox`` and are
processed in batches. A batch runs in one SQLite transaction: the core
writes its routing tables through, new outgoing frames of durable links go to their outboxes
and each source link's ``rx_seq`` is recorded; only after the commit are frames written and the
batch acknowledged (``store/broker_state.py``). Hence ``kill -9`` loses no acknowledged message.

Back-pressure: a broker link whose queue exceeds ``max_queue`` is *congested*; messages from
other links then wait in their inboxes (bounded by the peers' windows), which stops their
acknowledgements and so slows the publishers. Messages from the congested link itself are still
processed (in a tree they never produce output towards it), which rules out a wait cycle. A
client link over ``max_queue`` is a slow consumer: a non-durable one is disconnected, a durable
one loses the excess deliveries (``overload`` drops, counted).

A malformed frame closes only its link, with the reason logged; the broker keeps serving.

Revocation: with ``[revocation]`` in its configuration the broker polls the authority's signed
revocation list (:mod:`pubguard.net.server.revocation`) and revokes newly listed keys in its schemes
while it runs; publications dropped as ``revoked`` are logged (the first per link, then every
:data:`REVOKED_LOG_EVERY` th) and counted in the status. With ``crl`` in ``[tls]`` every peer
certificate is checked against the CA's X.509 CRL, reloaded when the file changes, and an
expired CRL is logged and reported in the status (:class:`~pubguard.net.crl.CrlWatch`).

Collaborators
-------------
The server is the state machine of the process; it owns its collaborators and hands each one
what it works on, explicitly (no mixins sharing ``self``):

- :class:`~pubguard.net.server.batching.BatchProcessor`: the batches, their transaction,
  the actions' application to the links and the back-pressure state;
- :class:`~pubguard.net.server.parent_link.ParentConnector`: dials and redials the parent and
  runs the ``hello`` exchange, reporting to the server through callbacks;
- :class:`~pubguard.net.server.upkeep.Upkeep`: lease expiry and heartbeats;
- :class:`~pubguard.net.server.revocation.RevocationWatcher`: the live revocation list;
- :class:`RevokedDrops`: the log of ``revoked`` drops.

The server keeps the links (``links``), accepts connections and their ``hello``, and routes
frames to the link's inbox or the batch processor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import ssl as _ssl
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pubguard.broker.actions import Action, Drop
from pubguard.broker.core import Broker
from pubguard.errors import (
    ConfigError,
    DropReason,
    FrameError,
    PubguardError,
    StateError,
    TransportError,
)
from pubguard.net import gc_tuning
from pubguard.net.config import BrokerConfig
from pubguard.net.conn import FrameConnection, PeerClosed
from pubguard.net.crl import CrlWatch
from pubguard.net.server.batching import BatchProcessor
from pubguard.net.server.hermes_node import (
    HERMES_PROFILES,
    hermes_greeted,
    hermes_greeting,
    hermes_pollers,
)
from pubguard.net.server.links import BROKER_WINDOW, Link
from pubguard.net.server.parent_link import ParentConnector, read_hello
from pubguard.net.server.pidfile import remove_pidfile, write_pidfile
from pubguard.net.server.revocation import RevocationWatcher
from pubguard.net.server.upkeep import Upkeep
from pubguard.net.tls import peer_identity
from pubguard.schemes.base import LinkKind, SchemeRegistry
from pubguard.schemes.common.replay import ReplayState
from pubguard.schemes.common.revocation_list import RevocationFeed
from pubguard.schemes.plain import PlainScheme
from pubguard.schemes.registry import PROFILES, BrokerKeys, build_registry
from pubguard.store.broker_state import BrokerStore, LinkRow
from pubguard.store.sqlite import Database
from pubguard.wire import envelope
from pubguard.wire.framing import encode_frame

__all__ = [
    "REVOKED_LOG_EVERY",
    "BrokerServer",
    "RevokedDrops",
    "check_identity",
    "read_port",
    "run_broker",
    "schemes_for",
]

log = logging.getLogger(__name__)

#: a link's ``revoked`` drops are logged for the first and then every this many
REVOKED_LOG_EVERY = 100


def schemes_for(
    profiles: str | Sequence[str],
    keys: BrokerKeys | Path | str | None = None,
    *,
    now: float | None = None,
    state_dir: Path | None = None,
    replay_db: Database | None = None,
) -> SchemeRegistry:
    """The broker faces of every profile a broker serves, built from public key material only
    (``keys``: a :class:`~pubguard.schemes.registry.BrokerKeys` or the path of its JSON; not
    needed for plain). Where narada / default keep their replay state, so a restarted broker
    reopens no replay window (narada §V-B): ``replay_db``, the broker's own state database
    (committed with each batch: a durable broker), else ``state_dir/replay.db``."""
    names = (profiles,) if isinstance(profiles, str) else tuple(profiles)
    for p in names:
        if p not in PROFILES:
            raise ConfigError(
                f"unknown profile {p!r} (known: {', '.join(PROFILES)})", key="profile"
            )
    if set(names) <= {"plain"}:
        return SchemeRegistry([PlainScheme()])
    if keys is None:
        raise ConfigError("serving a secure profile needs the broker keys (keys = ...)", key="keys")
    bk = keys if isinstance(keys, BrokerKeys) else BrokerKeys.load(keys)
    t = time.time() if now is None else now
    return build_registry(names, bk, now=t, state_dir=state_dir, replay_db=replay_db)


def check_identity(config: BrokerConfig) -> None:
    """ConfigError unless the broker's ``name`` is its certificate's common name. Peers know
    a broker by the name in its certificate (a child checks its parent's, the parent its
    children's), and the broker announces ``name`` in its ``hello``: two different names would
    let a broker speak for another and route under a name no certificate vouches for."""
    if config.tls is None:
        return
    from pubguard.crypto.x509 import load_certificate

    cn = load_certificate(config.tls.cert).name
    if cn != config.name:
        raise ConfigError(
            f"broker name {config.name!r} differs from the common name {cn!r} of its "
            f"certificate {config.tls.cert}: they must be equal",
            key="name",
        )


def _peer_identity(writer: FrameConnection) -> tuple[str | None, str | None]:
    """(common name, role) from the peer certificate, or (None, None) without TLS."""
    return peer_identity(writer.get_extra_info("ssl_object"))


class RevokedDrops:
    """Logs the publications dropped as ``revoked``: the first per link, then every
    :data:`REVOKED_LOG_EVERY` th, so an operator sees a revoked identity still publishing
    (narada-secure-delivery.txt §IV-H1: every message is checked against the revocation list)
    without a log line per message. Sees every list of actions the batch processor applies."""

    def __init__(self, name: str, core: Broker) -> None:
        self.name = name
        self.core = core
        self.seen = 0
        self.by_link: Counter[str] = Counter()

    def observe(self, actions: Sequence[Action]) -> None:
        n = self.core.drops.get(DropReason.REVOKED, 0)
        if n == self.seen:
            return  # only when these actions dropped something as revoked
        self.seen = n
        for a in actions:
            if isinstance(a, Drop) and a.reason is DropReason.REVOKED:
                k = self.by_link[a.link]
                self.by_link[a.link] += 1
                if k % REVOKED_LOG_EVERY == 0:
                    log.warning(
                        "broker %s: dropped %s %s from %s: revoked (%d so far)",
                        self.name,
                        a.op or "message",
                        a.message_id,
                        a.link,
                        k + 1,
                    )


class BrokerServer:
    """One broker process (or an in-process broker for demos and tests); see the module
    docstring for what it owns."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        ssl_server: _ssl.SSLContext | None = None,
        ssl_client: _ssl.SSLContext | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self.crl: CrlWatch | None = None
        if config.tls is not None and ssl_server is None:
            if config.tls.crl is not None:  # checked against the CA's CRL, reloaded live
                self.crl = CrlWatch(
                    f"broker {self.name}",
                    config.tls.crl,
                    config.tls.ca,
                    self._tls_contexts,
                    on_reload=self._crl_reloaded,
                )
                ssl_server, ssl_client = self.crl.server_context, self.crl.client_context
            else:
                ssl_server, ssl_client = self._tls_contexts()
        self.ssl_server, self.ssl_client = ssl_server, ssl_client
        check_identity(config)  # (after the TLS files were read) before any state is opened
        self.store: BrokerStore | None = None
        if config.durable:
            config.state_dir.mkdir(parents=True, exist_ok=True)
            self.store = BrokerStore(config.state_dir / "broker.db")
        replay_db = self.store.db if self.store is not None else None
        if replay_db is not None:  # an older broker's replay.db: carried over, not dropped
            ReplayState.import_file(config.state_dir / "replay.db", replay_db)
        # hermes profiles are broker-keyed (hermes_node: key groups joined at start)
        others = tuple(p for p in config.served if p not in HERMES_PROFILES) or ("plain",)
        registry = schemes_for(others, config.keys, replay_db=replay_db)
        near = ([config.parent.name] if config.parent else []) + list(config.children)
        self.hermes = hermes_pollers(  # stopped in close()
            config.served,
            name=config.name,
            state_dir=config.state_dir,
            tls=config.tls,
            neighbours=near,
        )
        for poller in self.hermes:
            registry.register(poller.scheme)
        self.core = Broker(
            config.name,
            registry,
            store=self.store,
            no_catch_up=config.no_catch_up,
        )
        self.links: dict[str, Link] = {}
        self.stats: Counter[str] = Counter()
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        self.failure: BaseException | None = None  # a batch raised: the server stops
        self.session = secrets.token_hex(8)
        self.malicious = _malicious_model(config)
        self.batches = BatchProcessor(
            self.name,
            self.core,
            self.store,
            self.links,
            max_queue=config.max_queue,
            hang_up=self._hang_up,
            stats=self.stats,
            observe=RevokedDrops(self.name, self.core).observe,
            record=config.record,
            transform=self.malicious.filter if self.malicious is not None else None,
            fail=self._failed,
        )
        self.upkeep = Upkeep(
            self.name,
            self.core,
            self.links,
            self.batches,
            heartbeat_interval=config.heartbeat_interval,
            heartbeat_timeout=config.heartbeat_timeout,
        )
        self.revocation: RevocationWatcher | None = None
        if config.revocation is not None:
            self.revocation = self._watch_revocations()
        self._restore()
        self.parent: ParentConnector | None = None
        if config.parent is not None:
            self.parent = ParentConnector(
                self.name,
                self.session,
                config.parent,
                self.links[f"b:{config.parent.name}"],
                self.ssl_client,
                on_reset=self._parent_reset,
                on_up=self._link_up,
                serve=self._read_loop,
                on_down=self._link_down,
                greeting=lambda: hermes_greeting(self.hermes),
                on_greeting=lambda peer, creds: hermes_greeted(self.hermes, peer, creds),
            )

    def _tls_contexts(self) -> tuple[_ssl.SSLContext, _ssl.SSLContext]:
        """The (server, client) contexts of ``[tls]`` as its files are now."""
        from pubguard.crypto.x509 import client_ssl_context, server_ssl_context
        from pubguard.net.tls import tls_password

        t, pw = self.config.tls, tls_password()  # an encrypted key: PUBGUARD_TLS_PASSPHRASE
        assert t is not None
        return (
            server_ssl_context(t.cert, t.key, t.ca, crl_path=t.crl, password=pw),
            client_ssl_context(t.cert, t.key, t.ca, crl_path=t.crl, password=pw),
        )

    def _crl_reloaded(self, ssl_client: _ssl.SSLContext | None) -> None:
        """A new CRL: links dialled from now on check their peer against it (new inbound
        connections get the new server context from :class:`CrlWatch` itself)."""
        self.ssl_client = ssl_client
        if self.parent is not None:
            self.parent.ssl = ssl_client
        if self.revocation is not None:
            self.revocation.ssl = ssl_client  # for its next dial

    def _watch_revocations(self) -> RevocationWatcher:
        """The live revocation list of ``[revocation]`` (narada-secure-delivery.txt §IV-A,
        §IV-H1), with the list kept from before a restart already applied."""
        cfg = self.config
        assert cfg.revocation is not None and cfg.keys is not None
        ak = BrokerKeys.load(cfg.keys).authority_key
        if ak is None:
            raise ConfigError(
                "[revocation] needs the authority key in the broker keys", key="revocation"
            )
        feed = RevocationFeed(ak, max_age=cfg.revocation.max_age)
        watcher = RevocationWatcher(
            self.name,
            cfg.revocation,
            feed,
            self.core.schemes,
            self.ssl_client,
            state_dir=cfg.state_dir,
        )
        watcher.restore()
        return watcher

    # -- state -----------------------------------------------------------------------------

    def _restore(self) -> None:
        st = self.store
        if st is not None:
            sess = st.get_meta("session")
            if sess is None:
                st.set_meta("session", self.session)
            else:
                self.session = sess
            rows = {r.link: r for r in st.links()}
        else:
            rows = {}
        stale: list[str] = []
        for link_id, info in list(self.core.links.items()):
            row = rows.get(link_id)
            if info.kind is LinkKind.CLIENT and (row is None or not row.durable):
                stale.append(link_id)  # a non-durable client: it re-subscribes when it returns
                continue
            link = self._new_link(link_id, info.kind.value, info.peer or "", row)
            if st is not None:
                for seq, frame in st.outbox(link_id):
                    link.outq[seq] = frame
        parent = self.config.parent
        if parent is not None:
            lid = f"b:{parent.name}"
            if lid not in self.links:
                self._new_link(lid, LinkKind.PARENT.value, parent.name, None)
                self.batches.apply(self.core.add_link(lid, LinkKind.PARENT, parent.name))
        for link_id in stale:
            self.batches.apply(self.core.remove_link(link_id, time.time()))
            if st is not None:
                st.forget_link(link_id)
        self.batches.flush()

    def _new_link(
        self,
        link_id: str,
        kind: str,
        peer: str,
        row: LinkRow | None,
        *,
        durable: bool | None = None,
        session: str = "",
    ) -> Link:
        role = "client" if kind == LinkKind.CLIENT.value else "broker"
        if durable is None:
            durable = role == "broker" or (row is not None and row.durable)
        link = Link(
            link_id,
            kind,
            peer,
            role=role,
            durable=durable and self.store is not None,
            session=row.session if row else session,
            rx_seq=row.rx_seq if row else 0,
            tx_next=row.tx_next if row else 1,
            window=BROKER_WINDOW,
        )
        self.links[link_id] = link
        if self.store is not None and link.durable and row is None:
            self.store.put_link(LinkRow(link_id, kind, link.session, True, 0, 1))
        return link

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> int:
        cfg = self.config
        port = cfg.port
        if port == 0 and self.store is not None:
            port = int(self.store.get_meta("port") or 0)  # sticky across restarts
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: FrameConnection(self._on_connection, raw=True),
                cfg.host,
                port,
                ssl=self.ssl_server,
                reuse_address=True,
            )
        except OSError as exc:  # name the port really tried (the sticky one, not 0)
            code = exc.errno or 0  # asyncio wraps bind errors in a long message
            why = os.strerror(code) if code > 0 else (exc.strerror or str(exc))
            where = f"listen address {cfg.host}:{port}"
            raise ConfigError(f"broker {self.name}: {where}: {why}", key="port") from None
        self.port = self._server.sockets[0].getsockname()[1]
        if self.store is not None:
            self.store.set_meta("port", str(self.port))
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = cfg.state_dir / "port.tmp"
        tmp.write_text(str(self.port))
        os.replace(tmp, cfg.state_dir / "port")
        self._spawn(self.upkeep.run())
        if self.crl is not None:
            self._spawn(self.crl.run())
        if self.revocation is not None:
            self._spawn(self.revocation.run())
        if self.parent is not None:
            self._spawn(self.parent.run())
        log.info("broker %s listening on %s:%d", self.name, cfg.host, self.port)
        return self.port

    def _spawn(self, coro: Any) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def serve_forever(self) -> None:
        """Serve until closed; raises :class:`~pubguard.errors.StateError` (one line) if a
        batch failed (:meth:`_failed`)."""
        assert self._server is not None
        if self.failure is None:
            try:
                await self._server.serve_forever()
            except asyncio.CancelledError:
                if self.failure is None:
                    raise
        if self.failure is not None:
            exc = self.failure
            raise StateError(
                f"broker {self.name}: stopped after a failed batch ({type(exc).__name__}:"
                f" {str(exc)[:200]}); restart it to resume from the last commit"
            )

    def _failed(self, exc: BaseException) -> None:
        """A batch raised (see :class:`~pubguard.net.server.batching.BatchProcessor`): stop
        serving; :meth:`serve_forever` then raises and the process exits non-zero."""
        self.failure = exc
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        self._closing = True
        self.batches.stop()
        for poller in self.hermes:
            poller.stop(timeout=0)  # signalled: it ends after any call in flight
        if self.parent is not None:
            self.parent.stop()
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for link in self.links.values():
            w = link.detach()
            if w is not None:
                with contextlib.suppress(Exception):
                    w.write(encode_frame(envelope.bye("broker shutting down")))
                    w.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
        self.batches.close()
        if self.store is not None:
            self.store.close()
            self.store = None

    # -- connections -----------------------------------------------------------------------

    def _on_connection(self, conn: FrameConnection) -> None:
        """A new connection (after its TLS handshake): served by a task of its own."""
        self._spawn(self._serve_connection(conn))

    async def _serve_connection(self, writer: FrameConnection) -> None:
        peer = writer.get_extra_info("peername")
        link: Link | None = None
        try:
            hello, rest = await read_hello(writer)
            link, resumed = self._accept_hello(hello, writer)
            writer.write(
                encode_frame(
                    envelope.hello(
                        self.name,
                        "broker",
                        self.session,
                        durable=link.durable,
                        rx=link.rx_seq,
                        resumed=resumed,
                        # a client learns what it may send (envelope.py); brokers need not
                        profiles=self.core.schemes.profiles if link.role == "client" else None,
                        # a neighbour broker learns this one's credentials (hermes §3.4)
                        creds=hermes_greeting(self.hermes) if link.role == "broker" else None,
                    )
                )
            )
            if link.role == "broker":
                hermes_greeted(self.hermes, hello["name"], hello.get("creds", []))
            if link.kind == LinkKind.CHILD.value and not resumed:
                self._link_up(link)
            self.core.link_live(link.link_id, time.time())
            # the peer's rx counts only for a resumed session; a new link starts from 1
            link.attach(writer, hello["rx"] if resumed else 0)
            await self._read_loop(link, writer, rest)
        except (FrameError, TransportError) as exc:
            self.stats["closed." + type(exc).__name__] += 1
            who = link.link_id if link else peer
            log.warning("broker %s: closing link %s: %s", self.name, who, exc)
            with contextlib.suppress(Exception):
                writer.write(encode_frame(envelope.bye(str(exc))))
        except (TimeoutError, OSError, _ssl.SSLError) as exc:  # OSError: PeerClosed, a bye too
            log.info("broker %s: connection %s ended: %s", self.name, peer, exc)
        except asyncio.CancelledError:
            pass
        finally:
            if link is not None and link.writer is writer:
                self._link_down(link)
            writer.close()

    def _accept_hello(self, hello: dict[str, Any], writer: FrameConnection) -> tuple[Link, bool]:
        name, role = hello["name"], hello["role"]
        cn, cert_role = _peer_identity(writer)
        if self.ssl_server is not None:
            if cn is None or not (name == cn or name.startswith(cn + "/")):
                raise TransportError(f"hello name {name!r} does not match certificate {cn!r}")
            if role == "broker" and cert_role != "broker":
                raise TransportError(f"{name!r} claims to be a broker but its certificate is not")
        if role == "broker":
            lid = f"b:{name}"
            if self.config.children and name not in self.config.children:
                raise TransportError(f"broker {name!r} is not a configured child")
            if self.config.parent is not None and name == self.config.parent.name:
                raise TransportError("the parent must not dial its child")
        else:
            lid = f"c:{name}"
        link = self.links.get(lid)
        session, durable = hello["session"], hello["durable"]
        if link is not None and (old := link.detach()) is not None:
            self._replace(link, old, session)
        resumed = link is not None and link.session == session
        if link is not None and not resumed:
            if role == "client" and link.durable and durable:
                link.rx_seq, link.session = 0, session  # a new process of a durable subscriber
                resumed = True
            else:
                self._drop_link(link)
                link = None
        if link is None:
            kind = LinkKind.CHILD if role == "broker" else LinkKind.CLIENT
            link = self._new_link(
                lid, kind.value, name, None, durable=durable or role == "broker", session=session
            )
            self.batches.apply(self.core.add_link(lid, kind, name))
        if self.store is not None and link.durable:
            self.store.put_link(LinkRow(lid, link.kind, session, True, link.rx_seq, link.tx_next))
        self.batches.flush()
        return link, resumed

    def _replace(self, link: Link, old: FrameConnection, session: str) -> None:
        """A new connection takes ``link`` over from ``old``. The same session is the peer
        itself reconnecting (its old connection is dead to it). Another session is another
        process under the same identity: the old connection is told why (its client stops
        instead of taking the identity back, which would knock this one off in a loop) and
        the replacement is logged as a warning."""
        self.stats["replaced"] += 1
        if link.session == session:
            log.info("broker %s: %s reconnected", self.name, link.link_id)
        else:
            self.stats["replaced.other_session"] += 1
            log.warning(
                "broker %s: %s replaced by a new connection with the same identity %r "
                "(two processes under one identity?)",
                self.name,
                link.link_id,
                link.peer,
            )
            with contextlib.suppress(Exception):
                old.write(encode_frame(envelope.bye_replaced(link.peer)))
        old.close()

    def _drop_link(self, link: Link) -> None:
        """Forget a link and everything that came over it."""
        self.links.pop(link.link_id, None)
        self.batches.forget(link.link_id)
        if link.link_id in self.core.links:
            self.batches.apply(self.core.remove_link(link.link_id, time.time()))
        if self.store is not None:
            self.store.forget_link(link.link_id)
        self.batches.flush()

    def _link_up(self, link: Link) -> None:
        """A broker link's peer did not resume our session: send our routing state again."""
        self.batches.apply(self.core.link_up(link.link_id))
        self.batches.flush()

    def _link_down(self, link: Link) -> None:
        link.detach()
        self.core.link_down(link.link_id, time.time())  # catch-up routing until it is back
        if link.role == "client" and not link.durable and not self._closing:
            self._drop_link(link)

    async def _read_loop(
        self, link: Link, conn: FrameConnection, frames: list[dict[str, Any]]
    ) -> None:
        """Serve the link until its connection ends: every chunk's envelopes go to
        :meth:`_on_frames` from the transport's callback (``net/conn.py``)."""
        await conn.run(lambda fs: self._on_frames(link, fs), frames)

    def _on_frames(self, link: Link, frames: list[dict[str, Any]]) -> None:
        link.last_rx = time.monotonic()
        for env in frames:
            t = envelope.check_envelope(env)
            if t == "m":
                link.inbox.append(env)
            elif t == "a":
                self._on_ack(link, env["u"])
            elif t == "st?":
                link.send_control(envelope.status_reply(env["q"], self.status()))
            elif t == "bye":
                raise PeerClosed(f"peer said bye: {env['reason']}")
            elif t == "hello":
                raise FrameError("unexpected second hello")
        if len(link.inbox) > 2 * BROKER_WINDOW:
            raise FrameError(f"peer overran its window ({len(link.inbox)} unprocessed)")
        if link.inbox:
            self.stats["reads"] += 1  # (status: chunks of reliable messages read)
            self.batches.process()
        if link.slow:
            raise TransportError("slow consumer")

    def _on_ack(self, link: Link, upto: int) -> None:
        if upto >= link.tx_next:
            raise FrameError(f"ack {upto} for a frame never sent")
        if link.on_ack(upto) and self.store is not None and link.durable:
            self.store.outbox_ack(link.link_id, upto)
        self.batches.acked(link)

    def _hang_up(self, link: Link, reason: str) -> None:
        """Say ``bye`` with ``reason`` and close the link's connection (the batch processor's
        way to end a link: a bad frame, a slow consumer); the serving task sees it end."""
        w = link.writer
        if w is not None:
            link.send_control(envelope.bye(reason))
            w.close()

    # -- the parent link (dialled and redialled by the ParentConnector) ----------------------

    def _parent_reset(self, link: Link) -> None:
        """The parent is a new process: its session is persisted, our ``rx_seq`` starts over."""
        if self.store is not None:
            self.store.put_link(
                LinkRow(link.link_id, link.kind, link.session, True, 0, link.tx_next)
            )

    # -- status ----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        st = self.core.status()
        st["port"] = self.port
        st["pid"] = os.getpid()
        st["durable"] = self.store is not None
        st["link_state"] = {k: v.info() for k, v in sorted(self.links.items())}
        # in flight on live links (what the bench watches); parked = kept for absent peers
        st["queue"] = sum(lk.depth + len(lk.inbox) for lk in self.links.values() if lk.writer)
        st["parked"] = sum(lk.depth for lk in self.links.values() if not lk.writer)
        st["congested"] = sorted(self.batches.congested)
        st["transport"] = dict(self.stats)
        st["profiles"] = list(self.config.served)
        st["domain"] = self.config.domain
        st["gc"] = gc_tuning.status()
        st["no_catch_up"] = sorted(self.core.no_catch_up)
        if self.revocation is not None:
            st["revocation"] = self.revocation.status()
        if self.crl is not None:
            st["crl"] = self.crl.status()
        if self.malicious is not None:  # research/test use: docs/resilience.md
            st["malicious"] = self.malicious.status()
        return st


def _malicious_model(config: BrokerConfig) -> Any:
    """The malicious node model of ``[malicious]`` (None for an honest broker), announced with
    one warning line (:mod:`pubguard.net.server.malicious`)."""
    if config.malicious is None:
        return None
    from pubguard.net.server.malicious import MaliciousModel  # loads the simulator's models

    model = MaliciousModel(config.name, config.malicious)
    model.warn()
    return model


async def run_broker(config: BrokerConfig, *, ready: asyncio.Event | None = None) -> None:
    """Run one broker until cancelled (``pubguard broker``); writes ``pid`` and ``port`` files."""
    server = BrokerServer(config)
    try:
        await server.start()
        write_pidfile(config.state_dir)  # only once listening: a second broker never clobbers it
        if ready is not None:
            ready.set()
        await server.serve_forever()
    except PubguardError:
        raise
    finally:
        await server.close()
        remove_pidfile(config.state_dir)


def read_port(state_dir: Path) -> int | None:
    try:
        return int((state_dir / "port").read_text().strip())
    except (OSError, ValueError):
        return None
