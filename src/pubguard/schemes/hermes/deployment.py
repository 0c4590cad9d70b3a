"""A Hermes deployment as a cluster configures it: the ``[hermes]`` table of ``cluster.toml``
(hermes-encrypted-access-control.txt §2.2-2.3, §4, Fig. 1).

Theory of operation
-------------------
One secure event type per cluster, its owner, the key-group manager's domain and what the
owner authorises each broker to read::

    [hermes]
    owner = "PITO"                      # the type owner (§2.2); its TLS identity may revoke
    type = "Numberplate"
    attributes = [["numberplate", "str"], ["location", "str"], ["camera", "int"]]
    kgm_domain = "pito"                 # where the key-group manager runs (§4): shown only
    owner_env = "PUBGUARD_HERMES_OWNER" # base64 32-byte seed of the owner's Ed25519 key;
                                        # unset: a fresh key in memory for this run
    grace = 30.0                        # seconds a superseded group key still opens (§4.2)
    poll = 0.5                          # seconds between a broker's asks for rekeys
    [hermes.grants]                     # broker -> the attributes it may read ("*": all)
    met1 = ["*"]
    ccs1 = ["numberplate"]

A broker the table does not list is authorised for nothing: it is never given the type
definition and routes ciphertext by type id (§3.3). :class:`HermesSettings` is the parsed,
checked table (public data only: the owner's key comes from the environment, never from the
file); ``pubguard.ops.hermes_cluster`` runs it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pubguard.errors import ConfigError, ValidationError
from pubguard.model.events import AttributeSpec, EventType
from pubguard.model.values import VALUE_TYPES
from pubguard.schemes.hermes.capability import ALL

__all__ = ["DEFAULT_OWNER_ENV", "HermesSettings", "parse_hermes"]

DEFAULT_OWNER_ENV: Final = "PUBGUARD_HERMES_OWNER"
_KEYS: Final = frozenset(
    {"owner", "type", "attributes", "kgm_domain", "owner_env", "grace", "poll", "grants"}
)


@dataclass(frozen=True, slots=True)
class HermesSettings:
    """The ``[hermes]`` table: one secure type, its owner and the brokers' grants."""

    owner: str
    etype: EventType
    grants: Mapping[str, tuple[str, ...]]  # broker -> attributes it may read
    kgm_domain: str = ""
    owner_env: str = DEFAULT_OWNER_ENV
    grace: float = 30.0
    poll: float = 0.5

    def readable(self, broker: str) -> tuple[str, ...]:
        """The attributes ``broker`` may read (empty: authorised for nothing)."""
        g = self.grants.get(broker, ())
        return tuple(a.name for a in self.etype.attributes) if ALL in g else g


def _fail(path: str | None, key: str, msg: str) -> ConfigError:
    where = f"{path}: " if path else ""
    return ConfigError(f"{where}hermes.{key}: {msg}", path=path, key=f"hermes.{key}")


def _number(data: Mapping[str, Any], key: str, default: float, path: str | None) -> float:
    v = data.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        raise _fail(path, key, f"must be a number > 0, got {v!r}")
    return float(v)


def _name(data: Mapping[str, Any], key: str, path: str | None) -> str:
    v = data.get(key)
    if not isinstance(v, str) or not v or not v.isprintable():
        raise _fail(path, key, "is required: a non-empty name")
    return v


def parse_hermes(
    data: Any, *, brokers: tuple[str, ...], path: str | None = None
) -> HermesSettings | None:
    """The checked ``[hermes]`` table (None when the cluster has none); ConfigError naming
    the dotted key of the first problem."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise ConfigError("hermes: must be a table", path=path, key="hermes")
    extra = sorted(set(data) - _KEYS)
    if extra:
        raise _fail(path, extra[0], "unknown key")
    owner = _name(data, "owner", path)
    tname = _name(data, "type", path)
    raw = data.get("attributes")
    if not isinstance(raw, list) or not raw:
        raise _fail(path, "attributes", "is required: a list of [name, type] pairs")
    specs = []
    for i, a in enumerate(raw):
        ok = isinstance(a, list) and len(a) == 2 and all(isinstance(x, str) and x for x in a)
        if not ok or a[1] not in VALUE_TYPES:
            raise _fail(path, f"attributes[{i}]", f"must be [name, one of {list(VALUE_TYPES)}]")
        specs.append(AttributeSpec(a[0], a[1]))
    try:
        etype = EventType(tname, tuple(specs))
    except ValidationError as exc:  # the model's own checks (duplicate names, ...)
        raise _fail(path, "attributes", str(exc)) from None
    names = {s.name for s in specs}
    graw = data.get("grants", {})
    if not isinstance(graw, Mapping):
        raise _fail(path, "grants", "must be a table of broker = [attributes]")
    grants: dict[str, tuple[str, ...]] = {}
    for b, attrs in graw.items():
        if b not in brokers:
            raise _fail(path, f"grants.{b}", f"no broker {b!r} in the topology")
        if not isinstance(attrs, list) or not attrs:
            raise _fail(path, f"grants.{b}", 'must be a non-empty list ("*" for every attribute)')
        for a in attrs:
            if a != ALL and a not in names:
                raise _fail(path, f"grants.{b}", f"{a!r} is not an attribute of {tname!r}")
        grants[b] = tuple(dict.fromkeys(attrs))
    env = data.get("owner_env", DEFAULT_OWNER_ENV)
    if not isinstance(env, str) or not env or not all(c.isalnum() or c == "_" for c in env):
        raise _fail(path, "owner_env", f"{env!r} is not an environment variable name")
    kd = data.get("kgm_domain", "")
    if not isinstance(kd, str):
        raise _fail(path, "kgm_domain", "must be a string")
    return HermesSettings(
        owner,
        etype,
        grants,
        kd,
        env,
        _number(data, "grace", 30.0, path),
        _number(data, "poll", 0.5, path),
    )
