"""txn_table._transaction_version: delta-rs is asked once per snapshot object, version and
app id; a snapshot at another version, another snapshot object, or a snapshot brought up to
date during the call asks again."""
import gc

from sinks import txn_table
from sinks.txn_table import _transaction_version


class FakeSnapshot:
    """A DeltaTable's two calls used here: version() and transaction_version(app_id); like a
    DeltaTable, it compares by value and is unhashable."""

    __hash__ = None

    def __init__(self, version: int, txns: dict[str, int], update_during_call: bool = False):
        self.at, self.txns, self.update_during_call, self.asked = version, dict(txns), update_during_call, []

    def version(self) -> int:
        return self.at

    def transaction_version(self, app_id: str) -> int | None:
        self.asked.append(app_id)
        if self.update_during_call:
            self.at += 1
        return self.txns.get(app_id)

    def __eq__(self, other):
        return isinstance(other, FakeSnapshot) and (self.at, self.txns) == (other.at, other.txns)


def test_one_call_per_version_and_app_id():
    table = FakeSnapshot(7, {"a": 3})
    assert [_transaction_version(table, "a") for _ in range(3)] == [3, 3, 3]
    assert _transaction_version(table, "b") is None
    assert _transaction_version(table, "b") is None
    assert _transaction_version(table, "a") == 3  # b's answer kept a's
    assert table.asked == ["a", "b"]


def test_a_new_version_asks_again():
    table = FakeSnapshot(7, {"a": 3})
    assert _transaction_version(table, "a") == 3
    table.at, table.txns["a"] = 8, 5  # update_incremental brought in a commit
    assert _transaction_version(table, "a") == 5
    assert _transaction_version(table, "a") == 5
    assert table.asked == ["a", "a"]


def test_another_snapshot_object_asks_again():
    first, second = FakeSnapshot(7, {"a": 3}), FakeSnapshot(7, {"a": 4})  # e.g. a table recreated
    assert _transaction_version(first, "a") == 3
    assert _transaction_version(second, "a") == 4
    assert second.asked == ["a"]


def test_an_answer_given_while_the_snapshot_moved_is_not_kept():
    table = FakeSnapshot(7, {"a": 3}, update_during_call=True)
    assert _transaction_version(table, "a") == 3
    table.update_during_call = False
    assert _transaction_version(table, "a") == 3
    assert table.asked == ["a", "a"]


def test_answers_go_with_the_snapshot_object():
    table = FakeSnapshot(7, {"a": 3})
    _transaction_version(table, "a")
    key = id(table)
    assert key in txn_table._ASKED
    del table
    gc.collect()
    assert key not in txn_table._ASKED
