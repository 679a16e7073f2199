"""A process keeps each table's file system (TableFileSystems): one per location and storage
options, the least recently used dropped past the bound, none carried into a forked child."""
import os

from sinks.table_file_systems import TableFileSystems


def made(calls):
    def factory(uri, options):
        calls.append((uri, dict(options)))
        return object()
    return factory


def test_one_file_system_per_location_and_options():
    calls = []
    kept = TableFileSystems(made(calls))
    first = kept.get("s3://b/t", {"AWS_REGION": "eu-west-1"})
    assert kept.get("s3://b/t", {"AWS_REGION": "eu-west-1"}) is first
    assert kept.get("s3://b/t", {"AWS_REGION": "us-east-1"}) is not first   # new credentials: a new client
    assert kept.get("s3://b/dead", {"AWS_REGION": "eu-west-1"}) is not first
    assert len(calls) == 3


def test_the_least_recently_used_goes_past_the_bound():
    calls = []
    kept = TableFileSystems(made(calls), max_kept=2)
    a = kept.get("/a", {})
    kept.get("/b", {})
    assert kept.get("/a", {}) is a           # /a used last: /b goes when /c comes
    kept.get("/c", {})
    assert kept.get("/a", {}) is a
    kept.get("/b", {})
    assert [uri for uri, _ in calls] == ["/a", "/b", "/c", "/b"]


def test_a_forked_child_starts_with_none(monkeypatch):
    calls = []
    kept = TableFileSystems(made(calls))
    parent = kept.get("/a", {})
    monkeypatch.setattr(os, "getpid", lambda: -1)
    assert kept.get("/a", {}) is not parent
    assert len(calls) == 2
