"""An scg-kafka member tells its planner how many cores the application has now: executors that
register after the query started (a cluster), or come and go with dynamic allocation, change how
many tasks a batch runs in (``assigned_offsets.task_groups``). Without Spark: a stand-in
SparkContext whose ``defaultParallelism`` the test changes."""
import threading
from types import SimpleNamespace

from groupmgr.core import TopicPartition
from pipelines.runtime import runner as runner_module
from pipelines.runtime.assigned_offsets import Claim
from pipelines.runtime.assigned_source import AssignmentFile
from pipelines.runtime.progress import ProgressPrinter
from pipelines.runtime.runner import PipelineRunner

A = TopicPartition("t", 0)


class Context:
    def __init__(self, cores):
        self.cores = cores

    @property
    def defaultParallelism(self):
        if isinstance(self.cores, Exception):
            raise self.cores
        return self.cores


def following_runner(tmp_path, cores) -> tuple[PipelineRunner, list[str]]:
    lines: list[str] = []
    runner = PipelineRunner.__new__(PipelineRunner)
    runner.progress = ProgressPrinter(lines.append)
    runner._init_lifecycle(follow=True)
    runner._assignment_dir = str(tmp_path)
    runner.spark = SimpleNamespace(sparkContext=Context(cores))
    runner._query = SimpleNamespace(isActive=True)
    runner._claims = {A: Claim(1, 0)}
    runner._task_slots = runner._application_cores()
    runner._publish_claims()
    return runner, lines


def published(runner) -> int | None:
    return AssignmentFile(runner._assignment_path()).read().task_slots


def test_new_cores_reach_the_planner_with_the_claims(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_module, "TASK_SLOTS_CHECK_S", 0.0)
    runner, lines = following_runner(tmp_path, 2)
    assert published(runner) == 2
    runner.spark.sparkContext.cores = 16        # executors registered
    runner._follow_application_cores()
    assert published(runner) == 16
    assert AssignmentFile(runner._assignment_path()).read().claims == {A: Claim(1, 0)}
    assert lines[-1].endswith("the application has 16 cores now (2 before): a batch runs in up to 16 tasks")
    runner.spark.sparkContext.cores = 4         # dynamic allocation removed some
    runner._follow_application_cores()
    assert published(runner) == 4


def test_spark_is_asked_at_most_once_per_interval(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_module, "TASK_SLOTS_CHECK_S", 3600.0)
    runner, _ = following_runner(tmp_path, 2)
    runner._follow_application_cores()          # the first check
    runner.spark.sparkContext.cores = 8
    runner._follow_application_cores()
    assert published(runner) == 2


def test_a_listener_holding_the_lock_only_delays_the_change(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_module, "TASK_SLOTS_CHECK_S", 0.0)
    runner, lines = following_runner(tmp_path, 2)
    runner.spark.sparkContext.cores = 8
    held, release = threading.Event(), threading.Event()

    def listener():
        with runner._lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=listener, daemon=True)
    thread.start()
    assert held.wait(10)
    runner._follow_application_cores()          # does not wait for the lock
    assert published(runner) == 2
    release.set()
    thread.join(10)
    runner._follow_application_cores()
    assert published(runner) == 8


def test_a_context_that_cannot_answer_keeps_the_last_count(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_module, "TASK_SLOTS_CHECK_S", 0.0)
    runner, lines = following_runner(tmp_path, 3)
    runner.spark.sparkContext.cores = RuntimeError("py4j gateway gone")
    runner._follow_application_cores()
    assert published(runner) == 3 and runner._task_slots == 3
