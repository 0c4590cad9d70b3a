"""Events, event types, constraints, filters, covering and their text/JSON forms."""

from pubguard.model.codec import (
    Subscription,
    event_from_json,
    filter_from_json,
    parse_json,
    read_events,
    read_subscriptions,
    subscription_from_json,
)
from pubguard.model.constraints import Constraint, Op
from pubguard.model.events import AttributeSpec, Event, EventType
from pubguard.model.filters import Filter
from pubguard.model.parser import format_filter, parse_filter
from pubguard.model.values import Value, type_class

__all__ = [
    "AttributeSpec",
    "Constraint",
    "Event",
    "EventType",
    "Filter",
    "Op",
    "Subscription",
    "Value",
    "event_from_json",
    "filter_from_json",
    "format_filter",
    "parse_filter",
    "parse_json",
    "read_events",
    "read_subscriptions",
    "subscription_from_json",
    "type_class",
]
