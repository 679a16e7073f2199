"""Spark's checkpoint files on the local file system go through Hadoop's FileSystem API
(spark_session.local_checkpoint_manager): the decision as a pure function, then the choice in a
real session, where a query must run with it."""
from __future__ import annotations

import pytest

from pipelines.runtime.spark_session import (CHECKPOINT_MANAGER_SETTING, LOCAL_CHECKPOINT_MANAGERS,
                                             local_checkpoint_manager, use_local_checkpoint_manager)

NEW, OLD = LOCAL_CHECKPOINT_MANAGERS


def test_a_local_root_gets_the_first_manager_this_spark_has():
    assert local_checkpoint_manager("file:/tmp/ckpt", None, lambda name: True) == NEW
    assert local_checkpoint_manager("file:///tmp/ckpt", None, lambda name: name == OLD) == OLD
    assert local_checkpoint_manager("file:/tmp/ckpt", None, lambda name: False) is None


@pytest.mark.parametrize("root", ["hdfs://nn:8020/ckpt", "s3a://bucket/ckpt", "abfss://c@a.dfs.core.windows.net/x"])
def test_other_file_systems_keep_sparks_choice(root):
    assert local_checkpoint_manager(root, None, lambda name: True) is None


def test_a_manager_the_user_set_is_kept():
    assert local_checkpoint_manager("file:/tmp/ckpt", "com.example.Mine", lambda name: True) is None


@pytest.mark.integration
def test_a_query_checkpoints_through_the_chosen_manager(spark, tmp_path):
    from pipelines.runtime.hadoop_fs import HadoopFileSystem

    spark = spark.newSession()  # runtime settings of its own: runners of other tests set this one on theirs
    assert spark.conf.get(CHECKPOINT_MANAGER_SETTING, None) is None
    try:
        chosen = use_local_checkpoint_manager(spark, str(tmp_path / "ckpt"), HadoopFileSystem(spark).qualify)
        assert chosen in LOCAL_CHECKPOINT_MANAGERS and spark.conf.get(CHECKPOINT_MANAGER_SETTING) == chosen
        assert use_local_checkpoint_manager(spark, "s3a://bucket/ckpt", lambda root: 1 / 0) is None  # unresolvable
        query = (spark.readStream.format("rate").option("rowsPerSecond", 5).load().writeStream
                 .foreachBatch(lambda df, batch_id: None).option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(processingTime="100 milliseconds").start())
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None
        assert (tmp_path / "ckpt" / "commits" / "0").exists() and (tmp_path / "ckpt" / "offsets" / "0").exists()
    finally:
        spark.conf.unset(CHECKPOINT_MANAGER_SETTING)
