"""A loopback TCP proxy in front of a real ``redis-server``, to lose what a real network loses.

``lose_next_reply(b"FCALL")`` forwards the next command containing those bytes to the server --
which runs it -- and closes the client's connection instead of passing the reply on: a write
applied whose answer never came back. ``stall()`` stops forwarding in both directions while
still accepting connections (a hung server behind a live port) -- ``wait_for_held(marker)``
waits until a command holding those bytes is held back -- ``flow()`` lets it go on, and
``cut()`` closes every connection (the server sees its clients go). ``connections`` counts the
connections accepted, and ``wait_for_connections(n)`` waits until there have been ``n``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Final

__all__ = ["Proxy"]

_CHUNK: Final = 65536


class Proxy:
    """Listens on a free loopback port (``port``) and forwards to ``127.0.0.1:upstream``."""

    def __init__(self, upstream: int) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._changed = threading.Condition()
        self.connections = 0
        self._lose_after: bytes | None = None
        self._held: list[bytes] = []  # what the clients sent while stalled
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="test-proxy").start()

    def lose_next_reply(self, marker: bytes) -> None:
        with self._changed:
            self._lose_after = marker

    def stall(self) -> None:
        self._flowing.clear()

    def flow(self) -> None:
        self._flowing.set()

    def cut(self) -> None:
        with self._changed:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def wait_for_connections(self, n: int, timeout: float = 30.0) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.connections >= n, timeout)

    def wait_for_held(self, marker: bytes, timeout: float = 30.0) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: any(marker in d for d in self._held), timeout)

    def close(self) -> None:
        self._closed = True
        self.flow()
        self._listener.close()
        self.cut()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self._upstream))
            except OSError:  # the server is gone (a test's teardown): so is this connection
                client.close()
                continue
            lost = threading.Event()  # set: the reply to the marked command is to be lost
            with self._changed:
                self._sockets += [client, server]
                self.connections += 1
                self._changed.notify_all()
            threading.Thread(
                target=self._pump, args=(client, server, lost, True), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(server, client, lost, False), daemon=True
            ).start()

    def _pump(
        self, source: socket.socket, target: socket.socket, lost: threading.Event, up: bool
    ) -> None:
        try:
            while True:
                data = source.recv(_CHUNK)
                if not data:
                    break
                if up and not self._flowing.is_set():
                    with self._changed:
                        self._held.append(data)
                        self._changed.notify_all()
                self._flowing.wait()
                if up:
                    with self._changed:
                        marker = self._lose_after
                        if marker is not None and marker in data:
                            self._lose_after = None
                            lost.set()
                elif lost.is_set():
                    break  # the server answered; the client never hears it
                target.sendall(data)
        except OSError:
            pass
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
