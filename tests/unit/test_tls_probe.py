"""speaks_tls: a listener counts as TLS only when it answers a ClientHello as TLS (the handshake
completes, or a TLS alert comes back); a listener that closes, refuses, or answers other bytes
does not (pipelines.runtime.kafka_access)."""
from __future__ import annotations

import socket
import ssl
import threading
from contextlib import contextmanager

from pipelines.runtime.kafka_access import speaks_tls
from tests.support.tls_material import Authority, certificate_pem, key_pem


@contextmanager
def serving(handle):
    """A loopback listener that hands each accepted connection to ``handle`` on a thread."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)

    def accept():
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5)
            try:
                handle(conn)
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        thread.join(5)


def tls_server(tmp_path, require_client_certificate=False):
    authority = Authority.make("localhost")
    (tmp_path / "cert.pem").write_bytes(certificate_pem(authority.certificate))
    (tmp_path / "key.pem").write_bytes(key_pem(authority.key))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    if require_client_certificate:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(tmp_path / "cert.pem")

    def handle(conn):
        try:
            with context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError):
            pass
    return handle


def test_a_tls_listener_speaks_tls(tmp_path):
    with serving(tls_server(tmp_path)) as port:
        assert speaks_tls("127.0.0.1", port, timeout_s=5) is True


def test_a_tls_listener_that_requires_a_client_certificate_speaks_tls(tmp_path):
    with serving(tls_server(tmp_path, require_client_certificate=True)) as port:
        assert speaks_tls("127.0.0.1", port, timeout_s=5) is True


def test_a_tls_alert_at_the_hello_is_tls():
    def alert(conn):
        conn.recv(4096)
        conn.sendall(bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28]))  # fatal handshake_failure
    with serving(alert) as port:
        assert speaks_tls("127.0.0.1", port, timeout_s=5) is True


def test_a_listener_that_closes_at_the_hello_does_not_speak_tls():
    with serving(lambda conn: conn.recv(4096)) as port:
        assert speaks_tls("127.0.0.1", port, timeout_s=5) is False


def test_a_listener_that_answers_other_bytes_does_not_speak_tls():
    def plain(conn):
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
    with serving(plain) as port:
        assert speaks_tls("127.0.0.1", port, timeout_s=5) is False


def test_a_refused_or_silent_listener_does_not_speak_tls():
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    assert speaks_tls("127.0.0.1", port, timeout_s=2) is False
    with socket.create_server(("127.0.0.1", 0)) as silent:  # connects (backlog), never answers
        assert speaks_tls("127.0.0.1", silent.getsockname()[1], timeout_s=0.5) is False
