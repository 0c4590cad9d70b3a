"""sim layer (see ARCHITECTURE.md): seeded workloads and, later, the virtual-time simulator."""

from pubguard.sim.workloads import (
    VCAPS_DICTIONARY,
    VCAPS_OPS,
    np_rng,
    vcaps_events,
    vcaps_filters,
)

__all__ = [
    "VCAPS_DICTIONARY",
    "VCAPS_OPS",
    "np_rng",
    "vcaps_events",
    "vcaps_filters",
]
