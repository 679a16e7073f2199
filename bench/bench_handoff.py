"""Hand-off benchmark: how long partitions pause when the group rebalances (not a test; the
numbers depend on the machine and its load).
It compares the cooperative hand-off (``group.assignor: cooperative-sticky``) with the eager one
(the pipeline default, ``range``). Both run in the same invocation against one local broker, so
compare the cooperative/eager ratios rather than the absolute seconds.

For each mode: one topic with ``--partitions`` partitions (12 by default), ``--members`` `scg run`
members (3 by default; each is its own Spark driver on ``local[1]``), and a SteadyProducer
(``--rate`` records/s, 100 by default). Once every member writes and has caught up on the backlog
from its start (its last two batches report a lag below ``--rate``), three events run in order:

1. ``join``  — one more member starts;
2. ``leave`` — one member stops cleanly (SIGTERM: it finishes its batch and leaves the group);
3. ``kill``  — one member is SIGKILLed (the group notices after ``session_timeout``, 6 s).

After each event the bench waits until the group has settled (every partition owned once, every
member owns some, every member wrote a batch after that), then ``--steady`` more seconds. That
interval ends the event's window and is the steady baseline of the next event.

Each line a member prints gets a time.monotonic() stamp when the bench reads it. A batch line
lists the partitions of its query in the lag part (``lag N [p:lag, ...]``); if that part is missing,
the batch counts for the partitions the member owned at the time. Per event and mode:

* partitions that stay (same owner before and after): for each, the longest gap between
  consecutive batches that cover it, from its last batch before the event to the end of the
  window. The pause is that gap minus the median gap between batches from the previous settle
  to the event (the normal cadence; at least the last four batches). Target: 0. It is also
  reported from the group's rebalance on (the first "revoked"/"assigned" line of a surviving
  member): a joining driver starts and warms up beside the members, on the same cores, before
  it joins, and the window from the action holds that too.
* members whose partitions did not change: the same on all their batches, and whether their
  query restarted (a "revoked", "starting query" or "fenced" line in the window);
* partitions that move: the time from their release to the first batch that covers them in the
  new owner (target ≤ 2 s). Release is the old owner's "revoked" line, or for a member that left or
  was killed, the group's rebalance (the first "revoked"/"assigned" line of a surviving member).
  Also reported: the data gap (last batch in the old owner to first in the new one) and the time
  from the SIGTERM/SIGKILL.

Modes (``--modes``, all three by default): ``eager`` (range) and ``cooperative``
(cooperative-sticky) read with Spark's own Kafka source (one query per assignment of the member,
restarted at a batch boundary when the assignment changes); ``follow`` is cooperative-sticky with
``source.reader: scg-kafka`` (one query per member that follows the assignment, never restarted by
a rebalance; a joining member rehearses one batch before it joins, the default).
``follow-60`` (not run by default) is ``follow`` with ``source.warm_up_limit: 60s``: a joining
member rehearses batches until they stop getting faster, for up to 60 s. Ingest throughput
of the two readers into the same sink is bench/bench_reader.py's (bench/results/reader.md, quoted
here when it exists).

Writes bench/results/handoff.json and bench/results/handoff.md (``--name`` changes the stem).

    .venv/bin/python bench/bench_handoff.py [--partitions 12] [--members 3] [--rate 100]
        [--steady 20] [--modes eager,cooperative,follow] [--quick] [--name handoff]

``--quick``: ``--steady 8`` (a smoke run; the numbers are noisier).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.local.local_kafka import LocalKafka  # noqa: E402
from tests.e2e.harness import MemberProcess, SteadyProducer, wait_until  # noqa: E402
from tests.support.kafka_data import create_topic, write_pipeline  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
# mode -> (assignor, source.reader); assignor None: the pipeline default (range)
MODES = {"eager": (None, "spark-kafka"), "cooperative": ("cooperative-sticky", "spark-kafka"),
         "follow": ("cooperative-sticky", "scg-kafka"), "follow-60": ("cooperative-sticky", "scg-kafka")}
MODE_TITLES = {"eager": "eager", "cooperative": "cooperative-sticky",
               "follow": "cooperative-sticky with the scg-kafka reader",
               "follow-60": "the same with warm_up_limit 60s"}
# mode -> its members' source.warm_up_limit (None: the default, one rehearsed batch)
WARM_UP_LIMITS = {"follow-60": "60s"}
START_TIMEOUT_S = 420      # members started together on a loaded 2-core machine
SETTLE_TIMEOUT_S = 240
WRITE_TIMEOUT_S = 120

T0 = time.monotonic()


def say(text: str) -> None:
    print(f"[{(time.monotonic() - T0) / 60:5.1f} min] {text}", flush=True)


# -- members with time-stamped lines -----------------------------------------------------------------
BATCH = re.compile(r"\] batch (\d+): (\d+) records")
LAG = re.compile(r"; lag \d+ \[([^\]]*)\]")
ASSIGNED = re.compile(r"generation (\d+): assigned (\d+) partition\(s\) \[([^\]]*)\]")
REVOKED = re.compile(r"revoked \d+ partition")
RESTART = re.compile(r"revoked \d+ partition|starting query|fenced by the group")
REBALANCE = re.compile(r"revoked \d+ partition|generation \d+: assigned")


class TimedMember(MemberProcess):
    """A MemberProcess that also keeps ``(time.monotonic(), line)`` for each line it reads."""

    def __init__(self, *args, **kwargs):
        self.timed: list[tuple[float, str]] = []
        self.exited_at: float | None = None
        super().__init__(*args, **kwargs)

    def _pump(self) -> None:
        for line in self.proc.stdout:
            text = line.rstrip("\n")
            self.timed.append((time.monotonic(), text))
            self.lines.append(text)
            self._log.write(f"{time.monotonic():.3f} {line}")
            self._log.flush()

    def parts(self) -> set[int]:
        return {p for _, p in self.owned()}

    def batches(self) -> list[tuple[float, frozenset[int]]]:
        """(time, partitions of the query) for each batch line."""
        out, owned = [], frozenset()
        for t, line in list(self.timed):
            m = ASSIGNED.search(line)
            if m:
                owned = frozenset(int(x.rsplit("-", 1)[1]) for x in m.group(3).split(", ") if x)
            elif REVOKED.search(line):
                owned = frozenset()
            if BATCH.search(line):
                lag = LAG.search(line)
                covered = (frozenset(int(x.split(":")[0]) for x in lag.group(1).split(", ") if x)
                           if lag else owned)
                out.append((t, covered))
        return out

    def first(self, regex, after: float, before: float = float("inf")) -> float | None:
        return next((t for t, line in list(self.timed) if after < t <= before and regex.search(line)), None)

    def caught_up(self, rate: int) -> bool:
        """The last two batch lines report a total lag below ``rate`` records (about a second)."""
        lags = [int(m.group(1)) for _, line in list(self.timed) if BATCH.search(line)
                for m in [re.search(r"; lag (\d+) \[", line)] if m][-2:]
        return len(lags) == 2 and max(lags) < rate

    def batch_count(self) -> int:
        return sum(1 for _, line in list(self.timed) if BATCH.search(line))


# -- one mode: start, events, analysis ----------------------------------------------------------------
def run_mode(mode: str, bootstrap: str, base: Path, args, started: list) -> dict:
    assignor, reader = MODES[mode]
    topic = group = f"handoff-{mode}"
    work = base / mode
    work.mkdir(parents=True)
    create_topic(bootstrap, topic, args.partitions)
    path = write_pipeline(work / "pipeline.yaml", bootstrap, topic, group, work,
                          extra='format: {type: json, schema: "id BIGINT, name STRING"}\n'
                                'spark: {spark.master: "local[1]"}\n', reader=reader,
                          warm_up_limit=WARM_UP_LIMITS.get(mode))
    if assignor:
        text = path.read_text()
        assert "  heartbeat_interval: 500ms\n" in text
        path.write_text(text.replace("  heartbeat_interval: 500ms\n",
                                     f"  heartbeat_interval: 500ms\n  assignor: {assignor}\n"))
    producer = SteadyProducer(bootstrap, topic, rate_per_s=args.rate).start()
    names = iter("abcdefghijklmnopqrstuvwxyz")
    members: list[TimedMember] = []

    def spawn() -> TimedMember:
        member = TimedMember(f"{mode}-{next(names)}", path, work)
        members.append(member)
        started.append(member)
        return member

    t_start = time.monotonic()
    say(f"{mode}: starting {args.members} members ({assignor or 'default assignor: range'})")
    for _ in range(args.members):
        spawn()
    wait_until(lambda: _settled(members, args.partitions) and all(m.batch_count() for m in members),
               START_TIMEOUT_S, f"{mode}: {args.members} members sharing {args.partitions} partitions and writing")
    startup_s = time.monotonic() - t_start
    say(f"{mode}: all {args.members} members write ({startup_s:.0f}s); waiting until they caught up")
    # the backlog produced while the drivers started makes the first batches long: no steady cadence yet
    wait_until(lambda: all(m.caught_up(args.rate) for m in members), START_TIMEOUT_S, f"{mode}: members caught up")
    say(f"{mode}: caught up ({time.monotonic() - t_start:.0f}s); steady {args.steady}s")
    t_prev = time.monotonic()
    time.sleep(args.steady)

    events = []
    everyone = {m.name: m for m in members}
    for kind in ("join", "leave", "kill"):
        before = {m.name: m.parts() for m in members}
        t_action = time.monotonic()
        gone = None
        if kind == "join":
            new = spawn()
            everyone[new.name] = new
            what = f"{new.name} joined"
        elif kind == "leave":
            # the member with the fewest partitions (the first among equals): the fewest partitions move
            gone = min(members, key=lambda m: len(m.parts()))
            members.remove(gone)
            code = gone.stop()
            gone.exited_at = time.monotonic()
            what = f"{gone.name} left (exit {code}, {gone.exited_at - t_action:.1f}s after SIGTERM)"
        else:
            gone = members[0]
            members.remove(gone)
            gone.kill()
            gone.exited_at = time.monotonic()
            what = f"{gone.name} was SIGKILLed"
        say(f"{mode}: {what}; waiting for the group to settle")
        wait_until(lambda: _settled(members, args.partitions), SETTLE_TIMEOUT_S, f"{mode}: group settled after {kind}")
        t_owned = time.monotonic()
        seen = {m.name: m.batch_count() for m in members}
        wait_until(lambda: all(m.batch_count() > seen[m.name] for m in members), WRITE_TIMEOUT_S,
                   f"{mode}: every member writing after {kind}")
        t_settled = time.monotonic()
        say(f"{mode}: settled {t_settled - t_action:.1f}s after the {kind}: "
            + ", ".join(f"{m.name}={len(m.parts())}" for m in members) + f"; steady {args.steady}s")
        time.sleep(args.steady)
        after = {m.name: m.parts() for m in members}
        event = analyse(kind, everyone, before, after, gone, t_action, t_owned, t_settled, time.monotonic(),
                        t_prev)
        t_prev = t_settled
        event["what"] = what
        events.append(event)
        say(f"{mode}: {kind}: " + _one_line(event))
    producer.stop()
    for m in members:
        m.kill()
    return {"assignor": assignor or "range (pipeline default)", "reader": reader, "events": events,
            "records_produced": producer.sent, "startup_s": startup_s}


def _settled(members, partitions: int) -> bool:
    owned = [p for m in members for p in m.parts()]
    return (len(owned) == partitions and len(set(owned)) == partitions
            and all(m.parts() for m in members) and all(m.proc.poll() is None for m in members))


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:])]


def _longest_gap(times: list[float], t_from: float, t_end: float) -> float | None:
    """Longest gap between batches from the last batch at/before ``t_from`` to ``t_end`` (a
    partition whose batches stopped counts until ``t_end``)."""
    span = [t for t in times if t <= t_from][-1:] + [t for t in times if t_from < t <= t_end]
    if span and span[-1] < t_end:
        span.append(t_end)
    gaps = _gaps(span)
    return max(gaps) if gaps else None


def _span_gap(times: list[float], t_action: float, t_end: float, t_prev: float,
              t_rebalance: float | None) -> dict:
    """The steady cadence (median and max gap between batches from ``t_prev``, the previous settle,
    to ``t_action``), and the longest gap and pause (longest gap − cadence) over two windows: from
    ``t_action`` (for a join this includes the new driver's start and warm-up, which compete for
    the same cores) and from ``t_rebalance``, the group's rebalance, to ``t_end``."""
    pre = [t for t in times if t_prev <= t <= t_action]
    if len(pre) < 3:  # too few batches since the previous settle: the last four before the event
        pre = [t for t in times if t <= t_action][-4:]
    pre_gaps = _gaps(pre)
    cadence = statistics.median(pre_gaps) if pre_gaps else None
    longest = _longest_gap(times, t_action, t_end)
    from_rebalance = None if t_rebalance is None else _longest_gap(times, t_rebalance, t_end)

    def pause(gap):
        return max(gap - cadence, 0.0) if gap is not None and cadence is not None else None

    return {"max_gap_s": longest, "steady_median_gap_s": cadence,
            "steady_max_gap_s": max(pre_gaps) if pre_gaps else None, "pause_s": pause(longest),
            "max_gap_from_rebalance_s": from_rebalance, "pause_from_rebalance_s": pause(from_rebalance)}


def analyse(kind, everyone, before, after, gone, t_action, t_owned, t_settled, t_end, t_prev) -> dict:
    owner_before = {p: n for n, ps in before.items() for p in ps}
    owner_after = {p: n for n, ps in after.items() for p in ps}
    batches = {n: m.batches() for n, m in everyone.items()}
    survivors = [everyone[n] for n in after if n in before]
    rebalance = min((t for t in (m.first(REBALANCE, t_action, t_end) for m in survivors) if t), default=None)

    staying, moved = {}, {}
    for p in sorted(owner_after):
        old, new = owner_before.get(p), owner_after[p]
        if old == new:
            times = [t for t, cov in batches[new] if p in cov]
            staying[p] = {"owner": new, "member_changed": before[new] != after[new],
                          **_span_gap(times, t_action, t_end, t_prev, rebalance)}
            continue
        first_new = next((t for t, cov in batches[new] if t > t_action and p in cov), None)
        last_old = ([t for t, cov in batches.get(old, []) if p in cov and t <= (first_new or t_end)][-1:] or [None])[0]
        if old is not None and everyone[old] in survivors:
            release, how = everyone[old].first(REVOKED, t_action, t_end), "revoked line of the old owner"
        else:
            release, how = rebalance, "group rebalance (first revoked/assigned line of a survivor)"
        moved[p] = {"from": old, "to": new, "release_how": how,
                    "release_to_first_batch_s": _minus(first_new, release),
                    "action_to_first_batch_s": _minus(first_new, t_action),
                    "data_gap_s": _minus(first_new, last_old)}

    unchanged = {}
    for n in after:
        if n in before and before[n] == after[n]:
            m = everyone[n]
            restarts = [line for t, line in list(m.timed) if t_action < t <= t_end and RESTART.search(line)]
            unchanged[n] = {"partitions": len(after[n]), "restarted": bool(restarts), "restart_lines": restarts[:4],
                            **_span_gap([t for t, _ in batches[n]], t_action, t_end, t_prev, rebalance)}
    changed_restarts = {n: sum(1 for t, line in list(everyone[n].timed) if t_action < t <= t_end
                               and re.search(r"starting query", line))
                        for n in after if n not in unchanged}

    def stats(values):
        values = [v for v in values if v is not None]
        return ({"n": len(values), "median": statistics.median(values), "max": max(values)} if values
                else {"n": 0, "median": None, "max": None})

    return {
        "event": kind, "departed": gone.name if gone else None,
        "staying_count": len(staying), "moved_count": len(moved),
        "settled_s": t_settled - t_action, "all_owned_s": t_owned - t_action,
        "monotonic": {"previous_settle": t_prev, "action": t_action, "all_owned": t_owned, "settled": t_settled,
                      "window_end": t_end},
        "rebalance_after_s": _minus(rebalance, t_action),
        "before": {n: sorted(ps) for n, ps in before.items()}, "after": {n: sorted(ps) for n, ps in after.items()},
        "staying": {"all": stats([s["pause_s"] for s in staying.values()]),
                    "max_gap": stats([s["max_gap_s"] for s in staying.values()]),
                    "steady_median_gap": stats([s["steady_median_gap_s"] for s in staying.values()]),
                    "on_unchanged_members": stats([s["pause_s"] for s in staying.values() if not s["member_changed"]]),
                    "on_changed_members": stats([s["pause_s"] for s in staying.values() if s["member_changed"]]),
                    "from_rebalance": stats([s["pause_from_rebalance_s"] for s in staying.values()]),
                    "on_unchanged_members_from_rebalance": stats([s["pause_from_rebalance_s"] for s in staying.values()
                                                                  if not s["member_changed"]]),
                    "per_partition": staying},
        "unchanged_members": unchanged,
        "query_starts_on_changed_members": changed_restarts,
        "moved": {"release_to_first_batch": stats([v["release_to_first_batch_s"] for v in moved.values()]),
                  "action_to_first_batch": stats([v["action_to_first_batch_s"] for v in moved.values()]),
                  "data_gap": stats([v["data_gap_s"] for v in moved.values()]),
                  "per_partition": moved},
    }


def _minus(a, b):
    return None if a is None or b is None else a - b


def _f(x, digits=1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _one_line(e: dict) -> str:
    s, mv = e["staying"], e["moved"]
    um = e["unchanged_members"]
    return (f"{e['staying_count']} staying partitions pause max {_f(s['all']['max'])}s median {_f(s['all']['median'])}s; "
            f"{len(um)} unchanged member(s) ({sum(u['restarted'] for u in um.values())} restarted); "
            f"{e['moved_count']} moved: release→first batch median "
            f"{_f(mv['release_to_first_batch']['median'])}s max {_f(mv['release_to_first_batch']['max'])}s; "
            f"settled {e['settled_s']:.1f}s")


# -- throughput (quoted) ---------------------------------------------------------------------------
# -- report ------------------------------------------------------------------------------------------
ROWS = [  # (label, getter, digits)
    ("group settled after the action (s)", lambda e: e["settled_s"], 1),
    ("partitions that stay with their owner", lambda e: e["staying_count"], 0),
    ("  steady batch cadence before, median (s)", lambda e: e["staying"]["steady_median_gap"]["median"], 2),
    ("  their longest batch gap, max (s)", lambda e: e["staying"]["max_gap"]["max"], 1),
    ("  their pause (gap − cadence), max (s)", lambda e: e["staying"]["all"]["max"], 1),
    ("  their pause, median (s)", lambda e: e["staying"]["all"]["median"], 1),
    ("  pause of those on unchanged members, max (s)", lambda e: e["staying"]["on_unchanged_members"]["max"], 1),
    ("  pause of those on members that gained/lost, max (s)", lambda e: e["staying"]["on_changed_members"]["max"], 1),
    ("  their pause from the group's rebalance on, max (s)", lambda e: e["staying"]["from_rebalance"]["max"], 1),
    ("  of those on unchanged members, from the rebalance on, max (s)",
     lambda e: e["staying"]["on_unchanged_members_from_rebalance"]["max"], 1),
    ("members whose partitions did not change", lambda e: len(e["unchanged_members"]), 0),
    ("  of them restarted their query", lambda e: sum(u["restarted"] for u in e["unchanged_members"].values()), 0),
    ("partitions that move", lambda e: e["moved_count"], 0),
    ("  release → first batch in new owner, median (s)", lambda e: e["moved"]["release_to_first_batch"]["median"], 1),
    ("  release → first batch in new owner, max (s)", lambda e: e["moved"]["release_to_first_batch"]["max"], 1),
    ("  data gap (last batch old → first new), max (s)", lambda e: e["moved"]["data_gap"]["max"], 1),
    ("  action → first batch in new owner, max (s)", lambda e: e["moved"]["action_to_first_batch"]["max"], 1),
]
RATIO_ROWS = {"  their pause (gap − cadence), max (s)", "  their pause, median (s)",
              "  their pause from the group's rebalance on, max (s)",
              "  release → first batch in new owner, median (s)", "  release → first batch in new owner, max (s)",
              "  data gap (last batch old → first new), max (s)", "group settled after the action (s)"}
EVENT_NAMES = {"join": "a member joins", "leave": "a member leaves (SIGTERM)", "kill": "a member is SIGKILLed"}


def markdown(results: dict) -> str:
    modes = [m for m in MODES if m in results["modes"]]
    compared = [m for m in modes if m != "eager"] if "eager" in modes else []
    out = [f"# Hand-off benchmark: {' vs '.join(MODE_TITLES[m] for m in modes)}, same run", "",
           f"{results['partitions']} partitions, {results['members']} members to start "
           f"(`scg run`, one Spark driver each on `local[1]`), SteadyProducer at {results['rate']} records/s, "
           f"trigger 500 ms, session_timeout 6 s, {results['cpu_count']} CPUs "
           f"(load average {results['load_average_start'][0]:.1f} at the start, "
           f"{results.get('load_average_end', [0])[0]:.1f} at the end), wall {results.get('wall_s', 0) / 60:.1f} min, "
           f"commit {results.get('commit') or '?'}. "
           "Events in order: a member joins; the member with the fewest partitions leaves (SIGTERM); "
           "the first member is SIGKILLed. Each line is stamped when the bench reads it.",
           "",
           "Targets: partitions that stay pause 0 s (their batches go on at every trigger); "
           "partitions that move flow in the new owner ≤ 2 s after they are released. "
           "Release is the old owner's `revoked` line, or for a member that left or was killed, "
           "the group's rebalance (the first `revoked`/`assigned` line of a surviving member). "
           "The pause of a staying partition is its longest gap between batches across the event "
           "minus its median gap from the previous settle to the event (at least the last four batches). "
           "It is measured twice: from the action, and from the group's rebalance on. For a join the "
           "first window also holds the new driver's start and warm-up, which run beside the members "
           "on the same cores before it joins. "
           "With Spark's Kafka source (reader `spark-kafka`), a member that gains or loses any partition "
           "restarts its query at a batch boundary (one query per assignment), so its staying partitions "
           "pause for that restart. With reader `scg-kafka` one query per member follows the assignment at "
           "every micro-batch and is never restarted by a rebalance.", ""]
    for mode in modes:
        out.append(f"- **{mode}**: assignor `{results['modes'][mode]['assignor']}`, reader "
                   f"`{results['modes'][mode].get('reader', 'spark-kafka')}`"
                   + (f"; `source.warm_up_limit: {WARM_UP_LIMITS[mode]}`: a joining member rehearses batches "
                      "until they stop getting faster, not one batch" if mode in WARM_UP_LIMITS else ""))
    out.append("")
    for i, kind in enumerate(("join", "leave", "kill")):
        evs = {m: results["modes"][m]["events"][i] for m in modes if len(results["modes"][m]["events"]) > i}
        if not evs:
            continue
        out += [f"## {EVENT_NAMES[kind]}", ""]
        out += ["| | " + " | ".join(modes) + " |" + "".join(f" {m} / eager |" for m in compared),
                "|---|" + "---:|" * (len(modes) + len(compared))]
        for label, get, digits in ROWS:
            vals = {m: get(e) for m, e in evs.items()}
            cells = [_f(vals.get(m), digits) if digits else ("–" if vals.get(m) is None else str(vals[m]))
                     for m in modes]
            ratios = []
            for m in compared:
                a, b = vals.get("eager"), vals.get(m)
                ratios.append(f"{b / a:.2f}" if label in RATIO_ROWS and a and b is not None else "")
            out.append(f"| {label} | " + " | ".join(cells) + " |" + "".join(f" {r} |" for r in ratios))
        out.append("")
        for m, e in evs.items():
            for n, u in e["unchanged_members"].items():
                if u["restarted"]:
                    out.append(f"- {m}: {n} kept its partitions but restarted its query: "
                               + "; ".join(f"`{line.split('] ', 1)[-1][:100]}`" for line in u["restart_lines"]))
            starts = {n: c for n, c in e["query_starts_on_changed_members"].items() if c}
            out.append(f"- {m}: {e['what']}; after: "
                       + ", ".join(f"{n}={len(ps)}" for n, ps in e["after"].items())
                       + (f"; query starts on members whose partitions changed: {starts}" if starts else ""))
        out.append("")
    if not any(e["unchanged_members"] for m in modes for e in results["modes"][m]["events"]):
        out += ["No member kept exactly its partitions in any event: with these partition and member counts, "
                "a balanced assignment changes every member's set (e.g. 12 over 3 → 4 members takes one "
                "partition from each). With reader `spark-kafka` their staying partitions then pause for the query "
                "restart at a batch boundary; with `scg-kafka` the query goes on. Fewer partitions per member "
                "(e.g. `--partitions 10`) leave some members unchanged.", ""]
    reader = RESULTS / "reader.md"
    out += ["## Ingest throughput", "",
            "`eager` and `cooperative` read with Spark's own Kafka source, `follow` with scg-kafka. "
            "bench/bench_reader.py measures the two readers into the same sink in one run"
            + (" (bench/results/reader.md):" if reader.exists() else " (no result file yet).")]
    if reader.exists():
        out += [""] + [line for line in reader.read_text().splitlines() if line.startswith("|")]
    out.append("")
    return "\n".join(out) + "\n"


def _commit() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent, capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001 - informative only
        return ""


def _save(results: dict, out: Path, name: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=2, default=str))
    (out / f"{name}.md").write_text(markdown(results))


# -- main ------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--members", type=int, default=3, help="members before the join")
    parser.add_argument("--rate", type=int, default=100, help="records/s produced")
    parser.add_argument("--steady", type=float, default=20.0, help="seconds of steady batches before each event")
    parser.add_argument("--modes", default="eager,cooperative,follow")
    parser.add_argument("--quick", action="store_true", help="--steady 8")
    parser.add_argument("--name", default="handoff", help="stem of the result files")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    if args.quick:
        args.steady = 8.0
    if args.members < 2:
        parser.error("--members must be at least 2 (one leaves, one is killed)")
    wall = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="scg-bench-handoff-"))
    print(f"scratch directory {base}", flush=True)
    results: dict = {"partitions": args.partitions, "members": args.members, "rate": args.rate,
                     "steady_s": args.steady, "cpu_count": os.cpu_count(), "load_average_start": os.getloadavg(),
                     "commit": _commit(), "modes": {}}
    out = Path(args.out)
    started: list[TimedMember] = []
    kafka = LocalKafka(base / "kafka")
    bootstrap = kafka.start().bootstrap_servers
    say(f"broker at {bootstrap}")
    try:
        for mode in filter(None, args.modes.split(",")):
            results["modes"][mode] = run_mode(mode, bootstrap, base, args, started)
            _save(results, out, args.name)
    finally:
        for member in started:
            try:
                member.kill()
            except Exception as exc:  # noqa: BLE001 - clean up the rest
                print(f"killing {member.name}: {exc}", flush=True)
        kafka.stop()
    results["wall_s"] = time.monotonic() - wall
    results["load_average_end"] = os.getloadavg()
    _save(results, out, args.name)
    print((out / f"{args.name}.md").read_text())


if __name__ == "__main__":
    main()
