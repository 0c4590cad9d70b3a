"""The pipeline's profile registry: which security profile a Spark run disseminates with.

Theory of operation. A *pipeline profile* is what ``pipeline run|match|stream`` and ``bench
pipeline`` need from a security profile, and nothing else: how the trusted side protects a
workload into tables, what an executor (an untrusted broker) checks and matches on those
tables, and how a subscriber opens what it was delivered. Every profile is one
:class:`PipelineProfile` (an abstract base) registered under its name with :func:`register`; adding one
(v-CAPS, Hermes) is one ``register(...)`` call in the module that defines it, listed in
:data:`PROFILE_MODULES` so the registry imports it on first use.

Two table layouts exist (``pubguard.pipeline.tables``):

- ``record``: psguard's record columns (tokens, hint, sealed secrets, payload, signature), the
  layout the psguard profile has always used (``pubguard.pipeline.stages``);
- ``wire``: the scheme's own publication as it travels on the broker network (``routing``,
  ``body``, ``meta``, msgpack-encoded) beside the join keys an executor derives from it with the
  broker face's decoder (``pubguard.pipeline.wire``). Validation runs the profile's broker
  ``broker_check``, opening its client's ``open_event``: the scheme code is the network's.

No crypto lives here or in the layouts: each profile calls its scheme's clients and brokers
(``pubguard.schemes``).
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pubguard.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

    from pubguard.model import Event, EventType, Filter

__all__ = [
    "PROFILE_MODULES",
    "PipelineProfile",
    "check_mode",
    "get_profile",
    "profile_names",
    "register",
]

#: modules that register pipeline profiles when imported (one line per new profile module)
PROFILE_MODULES: Final = (
    "pubguard.pipeline.wire_profiles",
    "pubguard.pipeline.psguard_profile",
    "pubguard.pipeline.vcaps_profile",
)

_REGISTRY: dict[str, PipelineProfile] = {}


class PipelineProfile(abc.ABC):
    """One security profile as the pipeline runs it. ``modes``: the routing modes it defines,
    the first being its default; ``mode_note``: why a mode it lacks is absent (the error for
    ``--mode`` names it); ``layout``: ``record`` or ``wire`` (see the module docstring);
    ``leaks_plaintext``: True for the baseline only (its tables hold the events in clear);
    ``event_columns``: the protected events table's columns; ``delivery_body``: the columns
    of a publication a subscriber opens (stored once per delivered event). A profile
    subclasses this (usually through :class:`pubguard.pipeline.wire.WireProfile`), sets
    what differs from these defaults and implements the abstract methods."""

    name: str = ""
    modes: tuple[str, ...] = ()
    mode_note: str = ""
    layout: str = "wire"
    leaks_plaintext: bool = False
    event_columns: tuple[str, ...] = ()
    delivery_body: tuple[str, ...] = ()

    # -- trusted side --------------------------------------------------------------------------
    @abc.abstractmethod
    def trusted(
        self,
        master: bytes,
        types: Sequence[EventType],
        *,
        mode: str,
        now_ms: int,
        seed: int | None,
        publisher: str = "p0",
        revoked: Sequence[str] = (),
    ) -> Any:
        """The trusted context (picklable: a local session's tasks may protect and open)."""
        ...

    @abc.abstractmethod
    def protect(
        self, spark: SparkSession, events: Sequence[Event], filters: Mapping[str, Filter], ctx: Any
    ) -> tuple[DataFrame, DataFrame]:
        """Protected events and filter-token tables (keys stay on the trusted side)."""
        ...

    @abc.abstractmethod
    def protect_events_pandas(self, events: Sequence[Event], ctx: Any) -> Any:
        """Protected event rows as a pandas DataFrame (tests, benchmarks)."""
        ...

    @abc.abstractmethod
    def protect_filters_pandas(self, filters: Mapping[str, Filter], ctx: Any) -> Any: ...

    @abc.abstractmethod
    def public(self, ctx: Any) -> dict[str, Any]:
        """What the manifest carries for the untrusted side: public keys only."""
        ...

    @abc.abstractmethod
    def open_outbox(
        self,
        outbox: Path,
        opened: Path,
        ctx: Any,
        filters: Mapping[str, Filter],
        spark: SparkSession | None,
    ) -> Any:
        """Open every delivery with its subscriber's keys; an ``OpenStats``."""
        ...

    # -- untrusted side (executors) ----------------------------------------------------------
    @abc.abstractmethod
    def events_schema(self) -> Any: ...

    @abc.abstractmethod
    def check_malformed(self, events: DataFrame, mode: str, path: Path) -> None: ...

    @abc.abstractmethod
    def validate(
        self, events: DataFrame, manifest: Mapping[str, Any], *, now_ms: int, max_delay_ms: int
    ) -> DataFrame:
        """``events`` plus a ``drop`` column (None = accepted) with the broker's reason."""
        ...

    @abc.abstractmethod
    def seen_columns(self) -> tuple[str, ...]:
        """Columns of an accepted event a stream remembers across micro-batches."""
        ...

    @abc.abstractmethod
    def against_seen(self, checked: DataFrame, seen: DataFrame) -> DataFrame:
        """Drop (replayed / duplicate) what earlier micro-batches accepted."""
        ...

    @abc.abstractmethod
    def match(
        self, events: DataFrame, filters: DataFrame, subs: DataFrame, *, mode: str
    ) -> DataFrame: ...

    @abc.abstractmethod
    def stream_matcher(
        self, spark: SparkSession, filters: DataFrame, subs: DataFrame, mode: str
    ) -> tuple[Callable[[DataFrame], DataFrame], Any]:
        """``(events -> deliveries, broadcast to unpersist)`` for a streaming query."""
        ...


def register(profile: PipelineProfile) -> PipelineProfile:
    """Add a profile (its ``name`` must be new); returns it, so a module can write
    ``DEFAULT = register(DefaultPipeline())``."""
    if profile.name in _REGISTRY and _REGISTRY[profile.name] is not profile:
        raise ConfigError(f"pipeline profile {profile.name!r} is registered twice", key="profile")
    _REGISTRY[profile.name] = profile
    return profile


def _load() -> None:
    for mod in PROFILE_MODULES:
        importlib.import_module(mod)


def profile_names() -> tuple[str, ...]:
    _load()
    return tuple(_REGISTRY)


def get_profile(name: str) -> PipelineProfile:
    """The registered profile (ConfigError naming the valid ones if unknown)."""
    _load()
    p = _REGISTRY.get(name)
    if p is None:
        raise ConfigError(
            f"unknown pipeline profile {name!r} (valid: {', '.join(_REGISTRY)})", key="profile"
        )
    return p


def check_mode(profile: str, mode: str | None) -> tuple[PipelineProfile, str]:
    """The profile and the mode to run it in (None: the profile's default); ConfigError for a
    mode the profile does not define, saying why."""
    p = get_profile(profile)
    if mode is None:
        return p, p.modes[0]
    if mode not in p.modes:
        if mode not in ("deterministic", "randomized"):
            raise ConfigError(
                f"unknown mode {mode!r} (valid: deterministic, randomized)", key="mode"
            )
        raise ConfigError(f"profile {p.name!r} has no {mode!r} mode: {p.mode_note}", key="mode")
    return p, mode
