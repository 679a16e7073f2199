"""Pure partition assignors (no I/O): the public plug-in API, built-ins and registry.

Write a plug-in by subclassing :class:`PartitionAssignor`; register it in the
entry-point group ``groupmgr.assignors`` or name it as ``package.module:Class``.
The group leader runs assignors through :func:`run_assignor`, which validates
every result before it is sent.
"""

from .api import COOPERATIVE, EAGER, MemberInfo, PartitionAssignor, Subscription, TopicPartition, rebalance_protocol
from .assignor_errors import (
    AssignorError,
    AssignorFailedError,
    AssignorImportError,
    DuplicateAssignorError,
    InvalidAssignmentError,
    UnknownAssignorError,
)
from .cooperative_sticky import CooperativeStickyAssignor
from .range import RangeAssignor
from .registry import ENTRY_POINT_GROUP, get_assignor, list_assignors
from .roundrobin import RoundRobinAssignor
from .sticky import StickyAssignor
from .validate import run_assignor, validate_assignment

__all__ = [
    "COOPERATIVE",
    "EAGER",
    "ENTRY_POINT_GROUP",
    "AssignorError",
    "AssignorFailedError",
    "AssignorImportError",
    "CooperativeStickyAssignor",
    "DuplicateAssignorError",
    "InvalidAssignmentError",
    "MemberInfo",
    "PartitionAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "TopicPartition",
    "UnknownAssignorError",
    "get_assignor",
    "list_assignors",
    "rebalance_protocol",
    "run_assignor",
    "validate_assignment",
]
