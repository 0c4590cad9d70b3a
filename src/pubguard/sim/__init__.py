"""The simulator: seeded workloads (the papers' shapes) and a discrete-event engine in virtual
time that drives the real broker core (scaling, flooding and the papers' experiments).

Public names are imported on first use (PEP 562 module ``__getattr__``), so that importing one
submodule, or the command line, does not load every heavy module of the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pubguard.lazy import lazy_exports

if TYPE_CHECKING:
    from pubguard.sim.engine import Delivery, DropRecord, SimClient, Simulator
    from pubguard.sim.scaling import (
        ScalingParams,
        ScalingPoint,
        run_scaling,
    )
    from pubguard.sim.scaling_sim import FixedCost, MeasuredCost, ScalingSim
    from pubguard.sim.topic_workloads import PSGUARD_KINDS, category_tree, zipf_weights
    from pubguard.sim.topology import SimTopology, random_tree
    from pubguard.sim.workloads import (
        SHAPES,
        VCAPS_DICTIONARY,
        VCAPS_OPS,
        Workload,
        build,
        generate,
        load_workload,
        np_rng,
        resolve_params,
        vcaps_events,
        vcaps_filters,
    )

__all__ = [
    "PSGUARD_KINDS",
    "SHAPES",
    "VCAPS_DICTIONARY",
    "VCAPS_OPS",
    "Workload",
    "build",
    "category_tree",
    "generate",
    "load_workload",
    "np_rng",
    "resolve_params",
    "vcaps_events",
    "vcaps_filters",
    "zipf_weights",
    # the virtual-time simulator (engine.py, topology.py)
    "Delivery",
    "DropRecord",
    "SimClient",
    "SimTopology",
    "Simulator",
    "random_tree",
    # one processor per entity, measured costs (scaling.py, scaling_sim.py)
    "FixedCost",
    "MeasuredCost",
    "ScalingParams",
    "ScalingPoint",
    "ScalingSim",
    "run_scaling",
]

_LAZY: dict[str, str] = {
    "PSGUARD_KINDS": "pubguard.sim.topic_workloads",
    "category_tree": "pubguard.sim.topic_workloads",
    "zipf_weights": "pubguard.sim.topic_workloads",
    "SHAPES": "pubguard.sim.workloads",
    "VCAPS_DICTIONARY": "pubguard.sim.workloads",
    "VCAPS_OPS": "pubguard.sim.workloads",
    "Workload": "pubguard.sim.workloads",
    "build": "pubguard.sim.workloads",
    "generate": "pubguard.sim.workloads",
    "load_workload": "pubguard.sim.workloads",
    "np_rng": "pubguard.sim.workloads",
    "resolve_params": "pubguard.sim.workloads",
    "vcaps_events": "pubguard.sim.workloads",
    "vcaps_filters": "pubguard.sim.workloads",
    "Delivery": "pubguard.sim.engine",
    "DropRecord": "pubguard.sim.engine",
    "SimClient": "pubguard.sim.engine",
    "Simulator": "pubguard.sim.engine",
    "SimTopology": "pubguard.sim.topology",
    "random_tree": "pubguard.sim.topology",
    "FixedCost": "pubguard.sim.scaling_sim",
    "MeasuredCost": "pubguard.sim.scaling_sim",
    "ScalingSim": "pubguard.sim.scaling_sim",
    "ScalingParams": "pubguard.sim.scaling",
    "ScalingPoint": "pubguard.sim.scaling",
    "run_scaling": "pubguard.sim.scaling",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
