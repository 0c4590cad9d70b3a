"""Hypothesis strategies for events, constraints and filters over a small attribute space.

The space is small on purpose (few names, few values) so random filters and events collide
often and covering / matching decisions are exercised on both sides.
"""

from __future__ import annotations

from hypothesis import strategies as st

from pubguard.model import Constraint, Event, Filter, Op

NAMES = ["a", "b", "c", "name"]
ints = st.integers(min_value=-5, max_value=5)
floats = st.sampled_from([-2.5, -1.0, 0.0, 0.5, 1.0, 2.0, 3.5])
strs = st.text(alphabet="abD.", max_size=4)
bools = st.booleans()
values = st.one_of(ints, floats, strs, bools)


@st.composite
def constraints(draw: st.DrawFn) -> Constraint:
    name = draw(st.sampled_from(NAMES))
    op = draw(st.sampled_from(list(Op)))
    if op is Op.EXISTS:
        return Constraint(name, op)
    if op in (Op.PREFIX, Op.SUFFIX, Op.SUBSTRING):
        return Constraint(name, op, draw(strs))
    if op in (Op.LT, Op.LE, Op.GT, Op.GE):
        return Constraint(name, op, draw(st.one_of(ints, floats, strs)))
    return Constraint(name, op, draw(values))


filters = st.lists(constraints(), min_size=1, max_size=4).map(lambda cs: Filter(tuple(cs)))
events = st.dictionaries(st.sampled_from(NAMES), values, max_size=4).map(Event)
