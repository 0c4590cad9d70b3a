"""sim layer (see ARCHITECTURE.md): seeded workloads and, later, the virtual-time simulator."""

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
