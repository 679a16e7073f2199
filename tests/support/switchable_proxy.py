"""A TCP forwarder on loopback that a test turns off and on: while off it refuses every new
connection (accepts and closes it at once) and cuts the ones open, as a server that is down."""
from __future__ import annotations

import socket
import threading


class SwitchableProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target`` (host, port) while :attr:`up`."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.up = True
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def down(self) -> None:
        """Refuse from now on, and cut every open connection."""
        self.up = False
        with self._lock:
            for conn in list(self._open):
                _close(conn)
            self._open.clear()

    def close(self) -> None:
        self._closed = True
        self.down()
        _close(self._server)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if not self.up:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True, name="proxy-pipe").start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for conn in (source, sink):
                _close(conn)
                with self._lock:
                    self._open.discard(conn)


def _close(conn: socket.socket) -> None:
    try:
        conn.close()
    except OSError:
        pass
