"""Key groups (hermes §4, Figs. 4-5): capability-checked joins, forward and backward secrecy,
timestamped keys with a grace period, timer, lazy and expiry refreshes."""

from __future__ import annotations

import random

import pytest

from pubguard.crypto import SigningKey
from pubguard.errors import DropError, DropReason
from pubguard.model.events import AttributeSpec, EventType
from pubguard.schemes.hermes import (
    BrokerKeyring,
    Capability,
    Crypter,
    KeyGroupManager,
    NonceCounter,
    SecureEventType,
    TypeView,
)
from pubguard.schemes.hermes.content import Sealed

NP = EventType(
    "Numberplate", (AttributeSpec("numberplate", "str"), AttributeSpec("location", "str"))
)
OWNER = SigningKey.from_seed(b"\x05" * 32)
STYPE = SecureEventType.define("PITO", NP, OWNER)
VIEW = TypeView.of(STYPE)


def cap(
    holder: str, serial: int, *, nb: float = 0.0, na: float = float("inf"), attrs=("*",)
) -> Capability:
    return Capability.issue(
        OWNER,
        holder=holder,
        type_id=STYPE.type_id,
        action="subscribe",
        attributes=attrs,
        not_before=nb,
        not_after=na,
        serial=serial,
    )


class Net:
    """A manager and its members' keyrings, broadcasts delivered to all."""

    def __init__(self, mode: str = "event", **kw: object) -> None:
        self.mgr = KeyGroupManager(STYPE, mode, **kw)  # type: ignore[arg-type]
        self.rings: dict[str, BrokerKeyring] = {}
        self.mode = mode
        self.rng = random.Random(1)

    def join(self, b: str, c: Capability, now: float) -> None:
        res = self.mgr.join(b, c, now=now, rng=self.rng)
        self.rings[b] = BrokerKeyring(b)
        self.rings[b].welcome(res.welcomes)
        self.bcast(res.rekeys)

    def bcast(self, rekeys: list) -> None:
        for r in self.rings.values():
            r.apply(rekeys)

    def seal(self, b: str, ts: float) -> dict:
        c = Crypter(b, self.mode, self.rings[b], NonceCounter(b))
        return c.seal_event(VIEW, {"numberplate": "AB12CDE", "location": "Soho"}, int(ts * 1000))

    def reads(self, b: str, sealed: dict) -> bool:
        return bool(Crypter(b, self.mode, self.rings[b], NonceCounter(b)).open_event(VIEW, sealed))


def test_a_broker_without_a_capability_is_refused_at_group_join() -> None:
    net = Net()
    net.join("met1", cap("met1", 1), 10.0)
    other = Capability.issue(
        SigningKey.from_seed(b"\x09" * 32),
        holder="isp1",
        type_id=STYPE.type_id,
        action="subscribe",
        not_before=0.0,
        serial=2,
    )
    for c, reason in [
        (other, DropReason.FORGED),  # not issued by the type owner
        (cap("met1", 3), DropReason.UNAUTHORISED),  # someone else's capability
        (cap("isp1", 4, na=5.0), DropReason.STALE),
    ]:
        with pytest.raises(DropError) as ei:
            net.mgr.join("isp1", c, now=10.0)
        assert ei.value.reason is reason
    with pytest.raises(DropError):  # event encryption: one key, so all attributes or none
        net.mgr.join("ccs1", cap("ccs1", 5, attrs=("numberplate",)), now=10.0)
    assert net.mgr.members() == ["met1"]


def test_backward_secrecy_a_new_broker_cannot_read_the_previous_epoch() -> None:
    net = Net()
    net.join("met1", cap("met1", 1), 10.0)
    before = net.seal("met1", 15.0)
    net.join("met2", cap("met2", 2, nb=20.0), 20.0)  # credential new since the last refresh
    assert not net.reads("met2", before)
    assert net.reads("met2", net.seal("met1", 25.0))


def test_forward_secrecy_a_departed_broker_cannot_read_the_next_epoch() -> None:
    net = Net(lazy=False)
    net.join("met1", cap("met1", 1), 10.0)
    net.join("met2", cap("met2", 2), 11.0)
    assert net.reads("met2", net.seal("met1", 12.0))
    net.bcast(net.mgr.leave("met2", now=20.0, rng=net.rng))
    assert not net.reads("met2", net.seal("met1", 21.0))


def test_lazy_refresh_fig5_join_and_leave() -> None:
    net = Net(lazy=True)
    net.join("met1", cap("met1", 1), 10.0)
    v = net.mgr.groups[VIEW.type_group].version
    net.join("met2", cap("met2", 2, nb=5.0), 20.0)  # valid at the last refresh: no refresh
    assert net.mgr.groups[VIEW.type_group].version == v
    net.join("met3", cap("met3", 3, nb=0.0, na=100.0), 30.0)
    net.bcast(net.mgr.leave("met3", now=40.0, rng=net.rng))
    assert net.mgr.groups[VIEW.type_group].version == v  # deferred to its expiry (Fig. 5)
    net.bcast(net.mgr.tick(now=100.0))
    assert net.mgr.groups[VIEW.type_group].version == v + 1
    assert not net.reads("met3", net.seal("met1", 101.0))


def test_expiry_and_revocation_evict_and_refresh_within_one_tick() -> None:
    net = Net(mode="attribute")
    net.join("met1", cap("met1", 1), 10.0)
    net.join("ccs1", cap("ccs1", 2, na=50.0, attrs=("numberplate",)), 11.0)
    net.join("met2", cap("met2", 3), 12.0)
    assert net.reads("ccs1", net.seal("met1", 13.0))
    net.bcast(net.mgr.tick(now=50.0))  # ccs1's capability ran out: evicted, refreshed
    assert not net.reads("ccs1", net.seal("met1", 51.0))
    net.bcast(net.mgr.revoke(3, now=60.0, rng=net.rng))
    assert not net.reads("met2", net.seal("met1", 61.0))
    assert net.mgr.members() == ["met1"]


def test_timer_refresh_and_grace_period_select_keys_by_timestamp() -> None:
    net = Net(refresh_every=60.0, grace=30.0)
    net.join("met1", cap("met1", 1), 0.0)
    net.join("met2", cap("met2", 2), 1.0)
    old = net.seal("met1", 5.0)
    net.bcast(net.mgr.tick(now=70.0))  # timer refresh: a new key tagged 70.0
    new = net.seal("met1", 71.0)
    assert Sealed.parse(new["s"]).ts > Sealed.parse(old["s"]).ts
    assert net.reads("met2", old) and net.reads("met2", new)  # old kept within the grace
    net.bcast(net.mgr.tick(now=140.0))  # a second refresh; the key of t=5 is past its grace
    assert not net.reads("met2", old)


def test_long_lived_crypters_follow_every_rekey_and_old_timestamps() -> None:
    """A broker's ``Crypter`` keeps its key choice per type between events (one look-up per
    event, not per attribute): a rekey must still take effect at once, for sealing and for
    opening, and an event stamped before the refresh still opens under the old key."""
    net = Net(mode="attribute", lazy=False, grace=30.0)
    net.join("met1", cap("met1", 1), 10.0)
    net.join("met2", cap("met2", 2), 11.0)
    phb = Crypter("met1", "attribute", net.rings["met1"], NonceCounter("met1"))
    shb = Crypter("met2", "attribute", net.rings["met2"], NonceCounter("met2"))
    attrs = {"numberplate": "AB12CDE", "location": "Soho"}
    first = phb.seal_event(VIEW, attrs, 12_000)
    assert shb.open_event(VIEW, first) == attrs
    net.join("met3", cap("met3", 3), 20.0)  # a refresh: backward secrecy for met3
    after = phb.seal_event(VIEW, attrs, 21_000)
    assert shb.open_event(VIEW, after) == attrs
    assert shb.open_event(VIEW, first) == attrs  # the old key, within its grace
    met3 = Crypter("met3", "attribute", net.rings["met3"], NonceCounter("met3"))
    assert met3.open_event(VIEW, after) == attrs and met3.open_event(VIEW, first) == {}
    net.bcast(net.mgr.leave("met2", now=30.0, rng=net.rng))  # forward secrecy for met2
    later = phb.seal_event(VIEW, attrs, 31_000)
    assert shb.open_event(VIEW, later) == {}
    assert met3.open_event(VIEW, later) == attrs
