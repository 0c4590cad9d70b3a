"""TOML configuration of one broker and of a local cluster, validated into frozen dataclasses.

Every problem raises :class:`~pubguard.errors.ConfigError` naming the file and the dotted key
(``key="parent.port"``), so ``pubguard broker --config`` can print one precise line.

One broker (``broker.toml``)::

    name = "b1"
    host = "127.0.0.1"
    port = 0                    # 0: ephemeral on first start, then sticky across restarts
    state_dir = "state/b1"      # SQLite state, port file, log
    profiles = ["default", "psguard"]   # the security profiles served (or profile = "plain")
    keys = "state/pki/broker-keys.json" # public key material (BrokerKeys JSON, no secrets);
                                # required for any profile but plain
    domain = "hospital"         # administrative domain (shown in status)
    no_catch_up = ["b3"]        # child brokers / durable clients never sent a new key epoch's
                                # publications unmatched while down (docs/network.md, Key epochs)
    record = "state/b1/seen.msgpack"    # optional: log every message seen (a curious broker)
    durable = true              # persist tables, outboxes and per-link state
    max_queue = 10000           # frames per outgoing link before back-pressure / slow consumer
    heartbeat_interval = 2.0
    heartbeat_timeout = 10.0

    [tls]                       # omit only with `tls = false` (tests of framing)
    ca = "state/ca/ca.pem"
    cert = "state/b1/tls.pem"
    key = "state/b1/tls.key"

    [parent]                    # the broker this one dials (hierarchical tree, eventguard §2.1)
    name = "b0"
    host = "127.0.0.1"
    port = 7001                 # or port_file = "state/b0/port"

    [revocation]                # poll the authority's signed revocation list (needs keys)
    keyservice = "127.0.0.1:7443"   # or keyservice_file = "state/ms-key.json" ({host, port})
    poll = 2.0                  # seconds between fetches
    max_age = 60.0              # a list older than this (issue time) is reported stale

    [malicious]                 # research/test use only (net/malicious_config.py)
    model = "selective"        # "selective" | "random" | "eavesdrop"; topics, tokens, prob, seed
    topics = ["alerts"]

A cluster (``cluster.toml``)::

    state_dir = "cluster-state"
    host = "127.0.0.1"
    [topology]
    kind = "tree"               # or "edges" with edges = [["b0", "b1"], ...] (parent, child)
    arity = 2
    depth = 2
    ind = 1                     # independent paths (eventguard.txt §5.2): each broker process
                                # serves the ind relabelled trees T_k (docs/resilience.md)
    external = [["b0", "h1"]]   # (parent, child): a child run by another domain on its own
                                # host (docs/deploy.md); listed by its parent, never started
    publishers = ["cli"]        # psguard publishers whose keys brokers must know up front
    [broker]                    # defaults applied to every broker
    durable = true
    profiles = ["plain"]
    [brokers.b1]                # per-broker overrides (any [broker] key, plus domain and
    domain = "cloud"            # record = true: log what it sees to <state>/b1/seen.msgpack)
    record = true
    [keyservice]                # run the key service beside the brokers (docs/deploy.md)
    profiles = ["default", "psguard", "eventguard"]   # default: those the brokers serve
    policy = "policy.json"      # the KDC policy (KdcConfig.policy_json); default: open
    master_env = "PUBGUARD_KEYSERVICE_MASTER"   # base64 master secret (the default), or
    # master_file = "master.pem"  # 0600, encrypted with PUBGUARD_TLS_PASSPHRASE
    port = 0                    # 0: any free port (recorded in <state>/cluster.json)
    [hermes]                    # a Hermes type, its owner and the brokers' grants: the
    owner = "PITO"              # cluster runs the owner's key-group manager (docs/hermes.md,
    type = "Numberplate"        # pubguard.schemes.hermes.deployment)
    attributes = [["numberplate", "str"]]
    [hermes.grants]
    b1 = ["*"]

When any broker serves a profile other than plain, the cluster writes the public key material
to ``<state>/pki/broker-keys.json`` (beside the CA) and points every broker's ``keys`` at it.
"""

from __future__ import annotations

import ipaddress
import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from pubguard.errors import ConfigError
from pubguard.net.malicious_config import MaliciousSettings, parse_malicious
from pubguard.schemes.hermes import HERMES_ATTRIBUTE, HERMES_EVENT, HermesSettings, parse_hermes
from pubguard.schemes.registry import PROFILES

#: broker-keyed profiles served beside the registry's (pubguard.net.server.hermes_node)
HERMES_PROFILES: Final = (HERMES_EVENT, HERMES_ATTRIBUTE)

__all__ = [
    "DEFAULT_CLUSTER",
    "KEYSERVICE_MASTER_ENV",
    "KEYSERVICE_NAME",
    "PROFILES",
    "BrokerConfig",
    "ClusterConfig",
    "KeyServiceSettings",
    "ParentLink",
    "RevocationSource",
    "TlsFiles",
    "chain_toml",
    "configured_state_dir",
    "load_broker_config",
    "load_cluster_config",
    "parse_broker_config",
    "parse_cluster_config",
    "tree_edges",
]

MAX_BROKERS: Final = 64
#: the key service's name in a cluster: its TLS identity and its record in cluster.json, so
#: no broker may take it
KEYSERVICE_NAME: Final = "keyservice"
#: where ``[keyservice]`` takes its master secret from unless it names another source
KEYSERVICE_MASTER_ENV: Final = "PUBGUARD_KEYSERVICE_MASTER"
#: the profiles whose keys, tokens and permits a cluster's key service serves
KEYSERVICE_SERVES: Final = ("default", "psguard", "psguard-paper", "eventguard", "narada")
#: why a wildcard bind address is refused: a client checks the broker's certificate against
#: the address it dials (a SubjectAlternativeName), and no client can dial "every interface"
WILDCARD_HOST: Final = (
    "{host!r} would listen on every interface, but clients verify the broker's certificate "
    'against the address they dial; set host to that address (e.g. "127.0.0.1")'
)


@dataclass(frozen=True, slots=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path
    crl: Path | None = None


@dataclass(frozen=True, slots=True)
class ParentLink:
    name: str
    host: str = "127.0.0.1"
    port: int | None = None
    port_file: Path | None = None


@dataclass(frozen=True, slots=True)
class RevocationSource:
    """Where a broker fetches the authority's revocation list (``[revocation]``)."""

    host: str | None = None
    port: int | None = None
    endpoint_file: Path | None = None  # JSON with "host" and "port" (the key service writes it)
    poll: float = 2.0
    max_age: float = 60.0


@dataclass(frozen=True, slots=True)
class KeyServiceSettings:
    """A cluster's key service (``[keyservice]``): the profiles it serves (empty: every one
    the brokers serve that a key service can), its KDC policy file (None: an open policy,
    ``admin`` its administrator), and where its master secret comes from: the environment
    variable ``master_env`` (base64), or ``master_file`` (0600, encrypted with
    ``PUBGUARD_TLS_PASSPHRASE``; :mod:`pubguard.crypto.keyfile`). Never a random one."""

    profiles: tuple[str, ...] = ()
    policy: Path | None = None
    master_env: str | None = KEYSERVICE_MASTER_ENV
    master_file: Path | None = None
    port: int = 0


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    name: str
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 0
    profile: str = "plain"
    durable: bool = True
    max_queue: int = 10_000
    heartbeat_interval: float = 2.0
    heartbeat_timeout: float = 10.0
    tls: TlsFiles | None = None
    parent: ParentLink | None = None
    children: tuple[str, ...] = ()
    profiles: tuple[str, ...] = ()  # every profile served; () means (profile,)
    keys: Path | None = None  # BrokerKeys JSON (public material only)
    domain: str | None = None
    record: Path | None = None  # append every message seen here (msgpack stream)
    revocation: RevocationSource | None = None
    no_catch_up: tuple[str, ...] = ()  # peers never caught up to (Broker.no_catch_up)
    #: the broker.toml of this node in each extra relabelled tree T_1 .. (served in this
    #: process beside this one, T_0: pubguard.net.server.multitree; docs/resilience.md)
    trees: tuple[Path, ...] = ()
    #: ``[malicious]``: run a malicious node model (research/test use; docs/resilience.md)
    malicious: MaliciousSettings | None = None

    @property
    def served(self) -> tuple[str, ...]:
        """The profiles this broker serves."""
        return self.profiles or (self.profile,)

    def with_(self, **kw: Any) -> BrokerConfig:
        return replace(self, **kw)


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    state_dir: Path
    edges: tuple[tuple[str, str], ...]  # (parent, child)
    brokers: tuple[str, ...]
    host: str = "127.0.0.1"
    defaults: Mapping[str, Any] = field(default_factory=dict)
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # [brokers.<n>]
    publishers: tuple[str, ...] = ("cli",)
    keyservice: KeyServiceSettings | None = None  # [keyservice]: run one beside the brokers
    #: (parent, child) edges to brokers other domains run on their own hosts
    external: tuple[tuple[str, str], ...] = ()
    #: independent paths per subscriber (eventguard.txt §5.2): ``[topology] ind``
    ind: int = 1
    #: ``[hermes]``: the secure type, its owner and the brokers' grants (docs/hermes.md)
    hermes: HermesSettings | None = None

    def settings(self, name: str) -> dict[str, Any]:
        """``[broker]`` defaults with ``[brokers.<name>]`` applied."""
        return {**self.defaults, **self.overrides.get(name, {})}

    @property
    def served(self) -> tuple[str, ...]:
        """Every profile some broker of the cluster serves."""
        out: list[str] = []
        for n in self.brokers:
            s = self.settings(n)
            out += s.get("profiles") or [s.get("profile", "plain")]
        return tuple(dict.fromkeys(out))

    @property
    def root(self) -> str:
        return self.brokers[0]

    def parent_of(self, name: str) -> str | None:
        for p, c in self.edges:
            if c == name:
                return p
        return None

    def children_of(self, name: str) -> tuple[str, ...]:
        """The children ``name`` accepts: the cluster's and the external ones."""
        return tuple(c for p, c in (*self.edges, *self.external) if p == name)


DEFAULT_CLUSTER: Final = """\
# embedded default: a 7-broker binary tree (a = 2, depth 2) on loopback
host = "127.0.0.1"
[topology]
kind = "tree"
arity = 2
depth = 2
[broker]
durable = true
"""


class _Reader:
    """Typed access to a TOML table that reports the dotted key of every problem."""

    def __init__(self, data: Mapping[str, Any], path: str | None, prefix: str = "") -> None:
        self.data, self.path, self.prefix = data, path, prefix
        self.seen: set[str] = set()

    def key(self, k: str) -> str:
        return f"{self.prefix}{k}"

    def fail(self, k: str, msg: str) -> ConfigError:
        where = f"{self.path}: " if self.path else ""
        return ConfigError(f"{where}{self.key(k)}: {msg}", path=self.path, key=self.key(k))

    def get(self, k: str, typ: type | tuple[type, ...], default: Any = ..., *, req: bool = False):
        self.seen.add(k)
        if k not in self.data:
            if req or default is ...:
                raise self.fail(k, "is required")
            return default
        v = self.data[k]
        types = typ if isinstance(typ, tuple) else (typ,)
        ok = isinstance(v, types) and not (isinstance(v, bool) and bool not in types)
        if not ok:
            names = " or ".join(t.__name__ for t in types)
            raise self.fail(k, f"must be {names}, got {type(v).__name__}")
        return v

    def table(self, k: str) -> _Reader | None:
        v = self.get(k, dict, None)
        return None if v is None else _Reader(v, self.path, f"{self.key(k)}.")

    def name(self, k: str, default: Any = ...) -> str:
        v = self.get(k, str, default)
        if not isinstance(v, str) or not v or not all(ch.isalnum() or ch in "-_." for ch in v):
            raise self.fail(k, f"{v!r} is not a valid name (letters, digits, - _ .)")
        return v

    def host(self, k: str) -> str:
        """An address to listen on or dial (default ``127.0.0.1``), never a wildcard."""
        v: str = self.get(k, str, "127.0.0.1")
        if not v.strip():
            raise self.fail(k, 'is empty: give the address clients dial, e.g. "127.0.0.1"')
        if _wildcard(v):
            raise self.fail(k, WILDCARD_HOST.format(host=v))
        return v

    def port(self, k: str, default: Any = ...) -> int:
        v = self.get(k, int, default)
        if v is not None and not 0 <= v <= 65535:
            raise self.fail(k, f"{v} is not a port number")
        return v

    def positive(self, k: str, typ: type | tuple[type, ...], default: Any) -> Any:
        v = self.get(k, typ, default)
        if v <= 0:
            raise self.fail(k, f"must be > 0, got {v}")
        return v

    def done(self) -> None:
        extra = sorted(set(self.data) - self.seen)
        if extra:
            raise self.fail(extra[0], "unknown key")


def _wildcard(host: str) -> bool:
    if host.strip() == "*":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_unspecified
    except ValueError:
        return False  # a name


def _path(base: Path, s: str) -> Path:
    p = Path(s)
    return p if p.is_absolute() else base / p


def parse_broker_config(
    data: Mapping[str, Any], *, path: str | None = None, base: Path | None = None
) -> BrokerConfig:
    base = base if base is not None else Path(path).parent if path else Path.cwd()
    r = _Reader(data, path)
    name = r.name("name")
    state_dir = _path(base, r.get("state_dir", str, f"state/{name}"))
    profile = r.get("profile", str, "plain")
    if profile not in PROFILES and profile not in HERMES_PROFILES:
        raise r.fail("profile", f"unknown profile {profile!r} (known: {', '.join(PROFILES)})")
    profiles = r.get("profiles", list, [])
    for i, p in enumerate(profiles):
        if p not in PROFILES and p not in HERMES_PROFILES:
            raise r.fail(f"profiles[{i}]", f"unknown profile {p!r} (known: {', '.join(PROFILES)})")
    if "profile" in data and profiles and profile not in profiles:
        raise r.fail("profile", f"{profile!r} is not among profiles = {profiles}")
    served = tuple(dict.fromkeys(profiles)) or (profile,)
    keys = r.get("keys", str, None)
    if keys is None and any(p != "plain" for p in served):
        secure = next(p for p in served if p != "plain")
        raise r.fail("keys", f"is required to serve profile {secure!r} (the broker keys JSON)")
    domain = r.get("domain", str, None)
    if domain is not None:
        r.name("domain")
    record = r.get("record", str, None)
    use_tls = r.get("tls_enabled", bool, True)
    tls: TlsFiles | None = None
    t = r.table("tls")
    if t is not None:
        crl = t.get("crl", str, None)
        tls = TlsFiles(
            _path(base, t.get("ca", str)),
            _path(base, t.get("cert", str)),
            _path(base, t.get("key", str)),
            _path(base, crl) if crl else None,
        )
        t.done()
    elif use_tls:
        raise r.fail("tls", "is required (or set tls_enabled = false for plain TCP)")
    if not use_tls:
        tls = None
    parent: ParentLink | None = None
    pt = r.table("parent")
    if pt is not None:
        pf = pt.get("port_file", str, None)
        parent = ParentLink(
            pt.name("name"),
            pt.host("host"),
            pt.port("port", None),
            _path(base, pf) if pf else None,
        )
        if (parent.port is None) == (parent.port_file is None):
            raise pt.fail("port", "give exactly one of port and port_file")
        pt.done()
    revocation = _revocation(r.table("revocation"), base)
    if revocation is not None and keys is None:
        raise r.fail("revocation", "needs the broker keys (keys = ...): the authority's key")
    children = r.get("children", list, [])
    for i, c in enumerate(children):
        if not isinstance(c, str) or not c:
            raise r.fail(f"children[{i}]", "must be a broker name")
    no_catch_up = r.get("no_catch_up", list, [])
    for i, c in enumerate(no_catch_up):
        if not isinstance(c, str) or not c:
            raise r.fail(f"no_catch_up[{i}]", "must be a child broker's or client's name")
    trees = r.get("trees", list, [])
    for i, tp in enumerate(trees):
        if not isinstance(tp, str) or not tp:
            raise r.fail(f"trees[{i}]", "must be the path of a broker.toml")
    malicious = parse_malicious(r.get("malicious", dict, None), r.fail)
    hb = r.positive("heartbeat_interval", (int, float), 2.0)
    hbt = r.positive("heartbeat_timeout", (int, float), 10.0)
    if hbt <= hb:
        raise r.fail("heartbeat_timeout", "must be greater than heartbeat_interval")
    cfg = BrokerConfig(
        name=name,
        state_dir=state_dir,
        host=r.host("host"),
        port=r.port("port", 0),
        profile=profile if "profile" in data or not profiles else served[0],
        durable=r.get("durable", bool, True),
        max_queue=r.positive("max_queue", int, 10_000),
        heartbeat_interval=float(hb),
        heartbeat_timeout=float(hbt),
        tls=tls,
        parent=parent,
        children=tuple(children),
        profiles=served if profiles else (),
        keys=_path(base, keys) if keys else None,
        domain=domain,
        record=_path(base, record) if record else None,
        revocation=revocation,
        no_catch_up=tuple(no_catch_up),
        trees=tuple(_path(base, tp) for tp in trees),
        malicious=malicious,
    )
    r.done()
    return cfg


def _revocation(t: _Reader | None, base: Path) -> RevocationSource | None:
    if t is None:
        return None
    ks = t.get("keyservice", str, None)
    kf = t.get("keyservice_file", str, None)
    if (ks is None) == (kf is None):
        raise t.fail("keyservice", "give exactly one of keyservice and keyservice_file")
    host = port = None
    if ks is not None:
        h, _, p = ks.rpartition(":")
        if not h or not p.isdigit() or not 0 < int(p) < 65536:
            raise t.fail("keyservice", f"{ks!r} is not host:port")
        host, port = h, int(p)
    poll = t.positive("poll", (int, float), 2.0)
    max_age = t.positive("max_age", (int, float), 60.0)
    if max_age <= poll:
        raise t.fail("max_age", "must be greater than poll")
    t.done()
    return RevocationSource(
        host, port, _path(base, kf) if kf else None, float(poll), float(max_age)
    )


def _load_toml(path: Path | str) -> dict[str, Any]:
    p = Path(path)
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror}", path=str(p)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}", path=str(p)) from None


def load_broker_config(path: Path | str) -> BrokerConfig:
    return parse_broker_config(_load_toml(path), path=str(path))


def tree_edges(arity: int, depth: int, prefix: str = "b") -> list[tuple[str, str]]:
    """Edges (parent, child) of a complete ``arity``-ary tree of ``depth`` (root alone: 0)."""
    n = sum(arity**d for d in range(depth + 1))
    return [(f"{prefix}{(i - 1) // arity}", f"{prefix}{i}") for i in range(1, n)]


def chain_toml(
    brokers: int,
    profiles: Iterable[str],
    *,
    publishers: Iterable[str] = (),
    heartbeat_interval: float | None = None,
) -> str:
    """The cluster.toml text of a chain ``b0 - b1 - ... - b<brokers-1>`` serving ``profiles``
    (for :func:`parse_cluster_config`; the soak and the network tests)."""
    edges = json.dumps([[f"b{i}", f"b{i + 1}"] for i in range(brokers - 1)])
    lines = [
        f"publishers = {json.dumps(list(publishers))}",
        "[topology]",
        'kind = "edges"',
        f"edges = {edges}",
        "[broker]",
        f"profiles = {json.dumps(list(dict.fromkeys(profiles)))}",
    ]
    if heartbeat_interval is not None:
        lines.append(f"heartbeat_interval = {heartbeat_interval}")
    return "\n".join(lines) + "\n"


def parse_cluster_config(
    data: Mapping[str, Any], *, path: str | None = None, base: Path | None = None
) -> ClusterConfig:
    base = base if base is not None else Path(path).parent if path else Path.cwd()
    r = _Reader(data, path)
    state_dir = _path(base, r.get("state_dir", str, "cluster-state"))
    host = r.host("host")
    t = r.table("topology")
    if t is None:
        raise r.fail("topology", "is required")
    kind = t.get("kind", str, "tree")
    if kind == "tree":
        arity = t.positive("arity", int, 2)
        depth = t.get("depth", int, 2)
        if depth < 0:
            raise t.fail("depth", "must be >= 0")
        if sum(arity**d for d in range(depth + 1)) > MAX_BROKERS:
            raise t.fail("depth", f"tree would exceed {MAX_BROKERS} brokers")
        edges = tree_edges(arity, depth)
        brokers = ["b0"] + [c for _, c in edges]
    elif kind == "edges":
        raw = t.get("edges", list)
        edges = []
        for i, e in enumerate(raw):
            if not (isinstance(e, list) and len(e) == 2 and all(isinstance(x, str) for x in e)):
                raise t.fail(f"edges[{i}]", "must be [parent, child]")
            edges.append((e[0], e[1]))
        brokers = _check_tree(edges, t)
    else:
        raise t.fail("kind", f"must be 'tree' or 'edges', got {kind!r}")
    ind = t.positive("ind", int, 1)
    if kind == "tree" and ind > max(arity, 1):
        raise t.fail("ind", f"must be at most the arity ({arity}): independent paths need siblings")
    external: list[tuple[str, str]] = []
    for i, e in enumerate(t.get("external", list, [])):
        if not (isinstance(e, list) and len(e) == 2 and all(isinstance(x, str) for x in e)):
            raise t.fail(f"external[{i}]", "must be [parent, child]")
        if e[0] not in brokers:
            raise t.fail(f"external[{i}]", f"no broker {e[0]!r} in the topology")
        if e[1] in brokers or e[1] in (c for _, c in external) or e[1] == KEYSERVICE_NAME:
            raise t.fail(f"external[{i}]", f"{e[1]!r} is already a name of the cluster")
        external.append((e[0], e[1]))
    t.done()
    defaults = _broker_defaults(r.table("broker"), "broker", path, base)
    overrides: dict[str, dict[str, Any]] = {}
    bt = r.table("brokers")
    if bt is not None:
        for name in list(bt.data):
            if name not in brokers:
                raise bt.fail(name, f"no broker {name!r} in the topology")
            overrides[name] = _broker_defaults(
                bt.table(name), f"brokers.{name}", path, base, per_broker=True
            )
        bt.done()
    pubs = r.get("publishers", list, ["cli"])
    for i, n in enumerate(pubs):
        if not isinstance(n, str) or not n:
            raise r.fail(f"publishers[{i}]", "must be an identity name")
    ks = _keyservice(r.table("keyservice"), base)
    hermes = parse_hermes(r.get("hermes", dict, None), brokers=tuple(brokers), path=path)
    if ks is not None and KEYSERVICE_NAME in brokers:
        raise t.fail("edges", f"{KEYSERVICE_NAME!r} names the key service, not a broker")
    r.done()
    return ClusterConfig(
        state_dir,
        tuple(edges),
        tuple(brokers),
        host,
        defaults,
        overrides,
        tuple(pubs),
        ks,
        tuple(external),
        ind,
        hermes,
    )


def _keyservice(t: _Reader | None, base: Path) -> KeyServiceSettings | None:
    """The ``[keyservice]`` table (None when the cluster runs no key service)."""
    if t is None:
        return None
    profiles = t.get("profiles", list, [])
    for i, p in enumerate(profiles):
        if p not in KEYSERVICE_SERVES:
            raise t.fail(
                f"profiles[{i}]",
                f"the key service serves {', '.join(KEYSERVICE_SERVES)}, not {p!r}",
            )
    policy = t.get("policy", str, None)
    env = t.get("master_env", str, None)
    mfile = t.get("master_file", str, None)
    if env is not None and mfile is not None:
        raise t.fail("master_env", "give one of master_env and master_file")
    if env is not None and not (env and all(c.isalnum() or c == "_" for c in env)):
        raise t.fail("master_env", f"{env!r} is not an environment variable name")
    port = t.port("port", 0)
    t.done()
    return KeyServiceSettings(
        tuple(dict.fromkeys(profiles)),
        _path(base, policy) if policy else None,
        None if mfile is not None else env or KEYSERVICE_MASTER_ENV,
        _path(base, mfile) if mfile else None,
        port,
    )


def _broker_defaults(
    d: _Reader | None, prefix: str, path: str | None, base: Path, *, per_broker: bool = False
) -> dict[str, Any]:
    """A ``[broker]`` / ``[brokers.<name>]`` table, validated through a throw-away broker
    config. ``record`` is a boolean here (the cluster chooses the file)."""
    if d is None:
        return {}
    out = dict(d.data)
    per = ("name", "parent", "children", "tls", "port", "state_dir", "keys", "revocation", "trees")
    for k in per:
        if k in out:
            raise d.fail(k, "is set per broker by the cluster, not in the cluster config")
    if "malicious" in out and not per_broker:
        raise d.fail("malicious", "is set per broker, in [brokers.<name>.malicious]")
    if "record" in out:
        if not isinstance(out["record"], bool):
            raise d.fail("record", "must be true or false")
        if not per_broker:
            raise d.fail("record", "is set per broker, in [brokers.<name>]")
    probe = {
        "name": "probe",
        "tls_enabled": False,
        "keys": "probe.json",
        **{k: v for k, v in out.items() if k != "record"},
    }
    try:
        parse_broker_config(probe, path=path, base=base)
    except ConfigError as exc:
        key = f"{prefix}.{exc.key}" if exc.key else prefix
        raise ConfigError(str(exc).replace(f"{exc.key}:", f"{key}:"), path=path, key=key) from None
    return out


def _check_tree(edges: list[tuple[str, str]], r: _Reader) -> list[str]:
    if not edges:
        raise r.fail("edges", "needs at least one edge")
    parents: dict[str, str] = {}
    for p, c in edges:
        if c in parents:
            raise r.fail("edges", f"{c!r} has two parents")
        parents[c] = p
    names = list(dict.fromkeys([n for e in edges for n in e]))
    roots = [n for n in names if n not in parents]
    if len(roots) != 1:
        raise r.fail("edges", f"a tree needs exactly one root, found {roots}")
    for n in names:
        seen = {n}
        while n in parents:
            n = parents[n]
            if n in seen:
                raise r.fail("edges", "the edges contain a cycle")
            seen.add(n)
    if len(names) > MAX_BROKERS:
        raise r.fail("edges", f"more than {MAX_BROKERS} brokers")
    order = [roots[0]]
    for n in order:  # breadth-first: parents start before children
        order.extend(c for p, c in edges if p == n)
    return order


def configured_state_dir(path: Path | str) -> Path | None:
    """The ``state_dir`` a cluster file sets (relative to the file's folder), or None when it
    sets none (``pubguard cluster up --config`` uses it unless ``--state`` is given)."""
    if "state_dir" not in _load_toml(path):
        return None
    return load_cluster_config(path).state_dir


def load_cluster_config(
    path: Path | str | None = None, *, state_dir: Path | None = None
) -> ClusterConfig:
    """Load ``path`` or, when None, the embedded default (7-broker binary tree)."""
    if path is None:
        data = tomllib.loads(DEFAULT_CLUSTER)
        cfg = parse_cluster_config(data, base=Path.cwd())
    else:
        cfg = parse_cluster_config(_load_toml(path), path=str(path))
    if state_dir is not None:
        cfg = replace(cfg, state_dir=state_dir)
    return cfg
