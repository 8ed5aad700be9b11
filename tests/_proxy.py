"""A TCP proxy for fault tests: forwards client requests to Redis and, at random, lets a script
call (EVALSHA, FCALL) through and then cuts the connection before its reply reaches the client (the
server ran the script; the client cannot know). Listens on 127.0.0.1 only."""

from __future__ import annotations

import contextlib
import random
import socket
import threading


class CuttingProxy:
    def __init__(self, upstream_port: int, cut_probability: float, seed: int = 0) -> None:
        self.upstream_port = upstream_port
        self.cut_probability = cut_probability
        self.rng = random.Random(seed)
        self.cuts = 0
        self.forwarded = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> CuttingProxy:
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        # shutdown() wakes the thread blocked in accept(); close() alone may not, and that thread
        # would then accept on whatever socket reuses the descriptor number next
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            for s in self._socks:
                _close(s)
        for t in self._threads:
            t.join(5)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._stop.is_set():
                _close(client)
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self._socks += [client, upstream]
            state = {"cut_next_reply": False}
            for src, dst, is_request in ((client, upstream, True), (upstream, client, False)):
                t = threading.Thread(
                    target=self._pump, args=(src, dst, is_request, state, client, upstream), daemon=True
                )
                t.start()
                self._threads.append(t)

    @staticmethod
    def _is_script_call(data: bytes) -> bool:
        """Whether a request runs a script: FCALL, or EVALSHA (functions=False, a cluster)."""
        head = data[:40].upper()
        return b"EVALSHA" in head or b"FCALL" in head

    def _pump(
        self,
        src: socket.socket,
        dst: socket.socket,
        is_request: bool,
        state: dict[str, bool],
        client: socket.socket,
        upstream: socket.socket,
    ) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if is_request:
                    with self._lock:  # only script calls: the connection handshake goes through
                        if self._is_script_call(data) and self.rng.random() < self.cut_probability:
                            state["cut_next_reply"] = True
                    dst.sendall(data)
                else:
                    if state["cut_next_reply"]:
                        with self._lock:
                            self.cuts += 1
                        break  # the server answered; the client never hears it
                    with self._lock:
                        self.forwarded += 1
                    dst.sendall(data)
        except OSError:
            pass
        _close(client)
        _close(upstream)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
