"""A Redis Cluster on 127.0.0.1 that a test starts and stops itself, from the bundled
redis-server binary: primaries with their slots, optional replicas, a slow slot migration (one
key per MIGRATE, the way a cautious operator moves a busy slot) and kill -9 of a node."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any

import redis
from redis.crc import key_slot

from contextstore.drivers.embedded import find_server

SLOTS = 16384


def cluster_ports(n: int, taken: list[int] | None = None) -> list[int]:
    """n free ports p, none of ``taken``, whose cluster bus port p + 10000 is free too."""
    found: list[int] = []
    taken = taken or []
    while len(found) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = int(s.getsockname()[1])
        used = {q + bus for q in found + taken for bus in (0, 10000, -10000)}  # no port doubles as a bus port
        if p + 10000 > 65535 or p in used:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p + 10000))
            except OSError:
                continue
        found.append(p)
    return found


class LocalCluster:
    """``primaries`` primaries (slots split evenly) and ``replicas`` replicas of each."""

    def __init__(self, primaries: int = 3, replicas: int = 0, node_timeout_ms: int = 2000, binary: str | None = None):
        self.binary = binary or find_server()
        self.dir = tempfile.mkdtemp(prefix="cs-cluster-")
        self.node_timeout_ms = node_timeout_ms
        self.primary_ports = cluster_ports(primaries)
        self.replica_ports = cluster_ports(primaries * replicas, self.primary_ports) if replicas else []
        self.replicas_per = replicas
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def ports(self) -> list[int]:
        return self.primary_ports + self.replica_ports

    def url(self, cluster: bool = True) -> str:
        """A URL naming the first primary (``?cluster=true``: a cluster client)."""
        return f"redis://127.0.0.1:{self.primary_ports[0]}/0" + ("?cluster=true" if cluster else "")

    def _spawn(self, port: int) -> None:
        # validity factor 0: a replica takes over however long ago it last heard its primary
        # (a busy, shared test machine must not turn a failover test into a wait for none)
        log = open(os.path.join(self.dir, f"{port}.log"), "ab")  # noqa: SIM115
        self.procs[port] = subprocess.Popen(
            [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", f"nodes-{port}.conf", "--cluster-node-timeout", str(self.node_timeout_ms),
             "--cluster-replica-validity-factor", "0",
             "--dir", self.dir, "--save", "", "--appendonly", "no", "--dbfilename", f"dump-{port}.rdb",
             "--repl-diskless-sync-delay", "0"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        self._wait_ping(port)

    def _wait_ping(self, port: int, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        with redis.Redis(port=port) as c:
            while True:
                try:
                    c.ping()
                    return
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)

    def logs(self, lines: int = 40) -> str:
        """The last ``lines`` of every node's log, for a failure message."""
        parts = []
        for port in self.ports:
            with open(os.path.join(self.dir, f"{port}.log"), errors="replace") as fh:
                parts.append(f"--- node {port} ---\n" + "".join(fh.readlines()[-lines:]))
        return "\n".join(parts)

    def node(self, port: int) -> redis.Redis:
        """A plain client of one node (close it)."""
        return redis.Redis(port=port)

    def start(self) -> LocalCluster:
        for p in self.ports:
            self._spawn(p)
        n = len(self.primary_ports)
        bounds = [SLOTS * i // n for i in range(n + 1)]
        for i, p in enumerate(self.primary_ports):
            with self.node(p) as c:
                c.execute_command("CLUSTER", "ADDSLOTS", *range(bounds[i], bounds[i + 1]))
        with self.node(self.primary_ports[0]) as first:
            for p in self.ports[1:]:
                first.execute_command("CLUSTER", "MEET", "127.0.0.1", p)
        self._wait(lambda: all(self._known(p) == len(self.ports) for p in self.ports), "nodes to meet")
        for i, p in enumerate(self.replica_ports):
            primary = self.primary_ports[i // self.replicas_per]
            with self.node(primary) as c:
                primary_id = c.execute_command("CLUSTER", "MYID").decode()
            with self.node(p) as c:
                c.execute_command("CLUSTER", "REPLICATE", primary_id)
        self._wait(self.healthy, "cluster_state:ok on every node")
        return self

    def _known(self, port: int) -> int:
        with self.node(port) as c:
            return len(c.execute_command("CLUSTER", "NODES").decode().strip().splitlines())

    def _running(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def _view(self, port: int) -> frozenset[tuple[str, str, str, str]]:
        """What one node believes of the others: (id, role, its primary, fail flag) each."""
        with self.node(port) as c:
            rows = [line.split() for line in c.execute_command("CLUSTER", "NODES").decode().splitlines()]
        return frozenset(
            (r[0], "slave" if "slave" in r[2] else "master", r[3], "fail" if "fail" in r[2] else "") for r in rows
        )

    def healthy(self) -> bool:
        """Every running node says cluster_state:ok, every replica is in sync, and every running
        node holds the same view of who replicates whom and who failed (an election needs the
        voters to know the replica's primary: a fresh view has not always reached them all)."""
        running = self._running()
        for p in running:
            with self.node(p) as c:
                if b"cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                    return False
                info = c.info("replication")
                if info["role"] == "slave" and info.get("master_link_status") != "up":
                    return False
        return len({self._view(p) for p in running}) == 1

    def _wait(self, ok: Any, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            if time.monotonic() > deadline:
                raise RuntimeError(f"test cluster: timed out waiting for {what}")
            time.sleep(0.05)

    def owner(self, slot: int) -> int:
        """The port of the primary serving ``slot`` (asked of a running node)."""
        for p, proc in self.procs.items():
            if proc.poll() is None:
                with self.node(p) as c:
                    for start, end, primary, *_ in c.execute_command("CLUSTER", "SLOTS"):
                        if start <= slot <= end:
                            return int(primary[1])
        raise RuntimeError(f"no node serves slot {slot}")

    def node_id(self, port: int) -> str:
        with self.node(port) as c:
            return str(c.execute_command("CLUSTER", "MYID").decode())

    def migrate_slot(self, slot: int, target: int, key_delay: float = 0.0) -> int:
        """Move ``slot`` to the primary on port ``target``, one key per MIGRATE with
        ``key_delay`` seconds between keys; returns how many keys moved."""
        source = self.owner(slot)
        if source == target:
            return 0
        src_id, dst_id = self.node_id(source), self.node_id(target)
        moved = 0
        with self.node(source) as src, self.node(target) as dst:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
            while True:
                keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1)
                if not keys:
                    break
                src.execute_command("MIGRATE", "127.0.0.1", target, keys[0], 0, 5000)
                moved += 1
                time.sleep(key_delay)
            for p in self.primary_ports + self.replica_ports:
                if self.procs[p].poll() is None:
                    # a replica refuses SETSLOT; it learns the change by gossip
                    with self.node(p) as c, contextlib.suppress(redis.ResponseError):
                        c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        return moved

    def kill(self, port: int) -> None:
        """kill -9 one node."""
        proc = self.procs[port]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def restart(self, port: int) -> None:
        """Start a killed node again (with its nodes.conf: it rejoins, as a replica if its
        slots were taken over)."""
        self._spawn(port)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def slot_of_window(prefix: str, window_id: str) -> int:
    """The cluster slot every key of a window hashes to."""
    return int(key_slot(f"{prefix}:{{{window_id}}}:meta".encode()))
