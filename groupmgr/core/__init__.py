"""Bottom layer: values and the error root shared by every package. Imports nothing else of the
project, so anything may import it."""
from groupmgr.core.offset_range import OffsetRange, ranges_between
from groupmgr.core.scg_error import ExitCategory, ScgError
from groupmgr.core.topic_partition import TopicPartition

__all__ = ["ExitCategory", "OffsetRange", "ScgError", "TopicPartition", "ranges_between"]
