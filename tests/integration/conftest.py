"""Fixtures of the integration tests: a real S3-compatible server and a secured Kafka node.
(Their per-test timeout and marker: tests/conftest.py.)"""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """A real S3-compatible server (s3proxy) on loopback for the session; tests make their own buckets."""
    from tests.support.s3_server import S3Server

    server = S3Server(tmp_path_factory.mktemp("s3")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory):
    """One secured Kafka node for the session (SASL_SSL SCRAM-SHA-512 and mutual-TLS listeners,
    StandardAuthorizer); yields its ``ClusterState``, whose ``.security`` (``ClusterSecurity``) gives
    the listeners, file paths and client settings. The client user ``scg-client`` (also the client
    certificate's principal) starts without ACLs: tests grant what they need with
    ``pipelines.local.acls.AclAdmin(state.security.admin_config())`` on names unique to the test."""
    import gc

    from pipelines.local.local_kafka import LocalKafka

    cluster = LocalKafka(tmp_path_factory.mktemp("secure-kafka"))
    state = cluster.start(brokers=1, secure=True)
    yield state
    gc.collect()  # Kafka clients held only by reference cycles close now, not after the broker is gone
    cluster.stop()
