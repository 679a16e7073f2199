"""Which output tables a pipeline's records go to, when it routes them to several.

Each output table has a route: a Spark SQL condition over the record's output row (its columns
as the output table has them: ``topic``, ``partition``, ``key``, the format's fields, ...), or
none (every record). A good record goes to every table whose condition is true. One that matches
none is a dead letter ``unrouted``; one that matches several is a dead letter ``ambiguous_route``
unless the pipeline lets a record land in several tables (``every_match``). So each record lands
in the dead-letter table or in the output tables its routes name, never nowhere.

Routes are decided with the rest of the classification, once per batch, on the executors
(:func:`routed` adds a boolean column per table and the two reasons); each table's rows are then
the good rows whose column is true, through that table's own transform.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipelines.runtime.records import REASON, RecordFormat, record_columns

UNROUTED = "unrouted"               # a good record no route takes
AMBIGUOUS_ROUTE = "ambiguous_route"  # ... several routes take, where a record may land in one table only
_HIDDEN = "_classified_"             # the classified columns while the output row is beside them


@dataclass(frozen=True)
class Routing:
    """The routes of a pipeline's output tables, in table order: ``conditions[i]`` (Spark SQL; None:
    every record) and ``transforms[i]`` (None: the output row as it is) are table ``i``'s;
    ``every_match``: a record goes to every table whose route takes it (else to exactly one)."""

    conditions: tuple[str | None, ...]
    transforms: tuple[str | None, ...]
    every_match: bool = False


def route_column(index: int) -> str:
    """The boolean column of :func:`routed` that says whether output table ``index`` takes a row."""
    return f"_route_{index}"


def routed(classified: DataFrame, fmt: RecordFormat, routing: Routing) -> DataFrame:
    """``classified`` (:func:`~pipelines.runtime.records.classify`'s rows) with one boolean column
    per output table (:func:`route_column`), true where the table's route takes the record's output
    row (a condition that is null is false), and the reason ``unrouted`` or ``ambiguous_route`` for
    good records no route, or several routes, take."""
    columns = classified.columns
    beside = classified.select(*[F.col(f"`{c}`").alias(_HIDDEN + c) for c in columns],
                               *record_columns(fmt).output_columns)
    takes = [F.lit(True) if condition is None else F.coalesce(F.expr(condition), F.lit(False))
             for condition in routing.conditions]
    rows = beside.select(*[F.col(f"`{_HIDDEN}{c}`").alias(c) for c in columns],
                         *[take.alias(route_column(i)) for i, take in enumerate(takes)])
    return rows.withColumn(REASON, _reason(len(takes), routing.every_match))


def _reason(tables: int, every_match: bool) -> Column:
    matches = sum((F.col(route_column(i)).cast("int") for i in range(tables)), F.lit(0))
    reason = F.when(F.col(REASON).isNotNull(), F.col(REASON)).when(matches == 0, F.lit(UNROUTED))
    if not every_match:
        reason = reason.when(matches > 1, F.lit(AMBIGUOUS_ROUTE))
    return reason.otherwise(F.lit(None).cast("string"))
