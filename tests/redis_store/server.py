"""A real ``redis-server`` on a free loopback port, started and stopped by the tests.

Debian's ``redis-server`` (``.ci/run`` installs it). A server is started with no snapshots and,
unless asked, no append-only file, in its own temporary directory; :meth:`RedisServer.kill`
and :meth:`RedisServer.start` let the fault tests crash it and bring it back on the same port
and directory (so an append-only file, when enabled, is read back); :meth:`RedisServer.pause`
and :meth:`RedisServer.resume` stop it answering (``SIGSTOP``: its port still accepts connections,
as a hung server's does) and let it go on.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from typing import TYPE_CHECKING, Any, Final

import redis

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["REDIS_SERVER", "RedisServer", "free_port"]

REDIS_SERVER: Final = shutil.which("redis-server")
_READY_SECONDS: Final = 20.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """One ``redis-server`` process; ``start()`` it, ``client()`` it, ``stop()`` it."""

    def __init__(
        self, directory: Path, *, appendonly: bool = False, extra: tuple[str, ...] = ()
    ) -> None:
        """``extra``: more ``redis-server`` arguments (a cluster node's, say)."""
        assert REDIS_SERVER is not None
        self.directory = directory
        self.appendonly = appendonly
        self.extra = extra
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self._process is None
        assert REDIS_SERVER is not None
        command = [
            REDIS_SERVER,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "always",
            "--dir", str(self.directory),
            "--daemonize", "no",
            "--logfile", str(self.directory / "redis.log"),
            *self.extra,
        ]  # fmt: skip
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        self._wait_ready()

    def _wait_ready(self) -> None:
        client = self.client(socket_timeout=1.0)
        started = time.monotonic()
        try:
            while True:
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    assert self._process is not None
                    if self._process.poll() is not None:
                        log = (self.directory / "redis.log").read_text(errors="replace")
                        raise RuntimeError(f"redis-server exited: {log[-2000:]}") from None
                    if time.monotonic() - started > _READY_SECONDS:
                        raise
                    time.sleep(0.01)  # polling a starting server, not ordering a race
        finally:
            client.close()

    @property
    def running(self) -> bool:
        """Started, and neither stopped nor killed since (a paused one is running)."""
        return self._process is not None

    def client(self, **kwargs: Any) -> redis.Redis:
        kwargs.setdefault("socket_timeout", 5.0)
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def pause(self) -> None:
        """Stop the process (SIGSTOP), and return once it is stopped: it reads nothing more."""
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)
        os.waitpid(self._process.pid, os.WUNTRACED)  # returns when the child has stopped

    def resume(self) -> None:
        """Let a paused process go on (SIGCONT); harmless on one that is not paused."""
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """Crash it (SIGKILL): nothing is flushed that was not already."""
        assert self._process is not None
        self._process.kill()
        self._process.wait()
        self._process = None

    def stop(self) -> None:
        if self._process is not None:
            self.resume()  # a paused process would not act on SIGTERM
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
