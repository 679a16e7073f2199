"""Pure partition assignors (no I/O): the public plug-in API, built-ins and registry.

Write a plug-in by subclassing :class:`PartitionAssignor`; register it in the
entry-point group ``groupmgr.assignors`` or name it as ``package.module:Class``.
The group leader runs assignors through :func:`run_assignor`, which validates
every result before it is sent.
"""

from .api import MemberInfo, PartitionAssignor, Subscription, TopicPartition
from .assignor_errors import (
    AssignorError,
    AssignorFailedError,
    AssignorImportError,
    DuplicateAssignorError,
    InvalidAssignmentError,
    UnknownAssignorError,
)
from .range import RangeAssignor
from .registry import ENTRY_POINT_GROUP, get_assignor, list_assignors
from .roundrobin import RoundRobinAssignor
from .sticky import StickyAssignor
from .validate import run_assignor, validate_assignment

__all__ = [
    "ENTRY_POINT_GROUP",
    "AssignorError",
    "AssignorFailedError",
    "AssignorImportError",
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
    "run_assignor",
    "validate_assignment",
]
