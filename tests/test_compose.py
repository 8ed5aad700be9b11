"""docker-compose.yml, checked without Docker: it validates against the Compose
Specification's JSON schema (tests/data/compose_spec.json, from docker-compose 1.29.2, Apache
2.0), and what each service runs is what the docs promise: a standalone Redis with AOF by
default, a ``cluster`` profile of six nodes plus a job that joins them (3 primaries, one
replica each), and demo services whose ``contextstore`` command lines parse."""

from __future__ import annotations

import json
import pathlib
import shlex
from typing import Any

import jsonschema
import pytest
import yaml

from contextstore.cli import cli

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


def _flat(command: Any) -> str:
    return " ".join(command) if isinstance(command, list) else str(command)


def _profiles(service: dict[str, Any]) -> list[str]:
    return list(service.get("profiles", []))


def test_the_file_follows_the_compose_specification(compose):
    schema = json.loads((ROOT / "tests" / "data" / "compose_spec.json").read_text())
    jsonschema.Draft201909Validator(schema).validate(compose)
    with pytest.raises(jsonschema.ValidationError):  # the validator does reject a broken file
        jsonschema.Draft201909Validator(schema).validate({**compose, "services": {"x": {"ports": "6379"}}})


def test_by_default_one_redis_with_aof(compose):
    default = {name: s for name, s in compose["services"].items() if not _profiles(s)}
    assert list(default) == ["redis"]
    command = _flat(default["redis"]["command"])
    assert "--appendonly yes" in command and "6379:6379" in default["redis"]["ports"]
    assert any(str(v).endswith(":/data") for v in default["redis"]["volumes"])


def test_the_cluster_profile_has_six_nodes_and_a_job_that_joins_them(compose):
    services = compose["services"]
    nodes = sorted(n for n, s in services.items() if "cluster" in _profiles(s) and n.startswith("redis-node-"))
    assert nodes == [f"redis-node-{i}" for i in range(1, 7)]
    volumes = set()
    for n in nodes:
        command = _flat(services[n]["command"])
        assert "--cluster-enabled yes" in command and "--appendonly yes" in command
        volumes.update(services[n]["volumes"])
    assert len(volumes) == 6  # each node keeps its own data and nodes.conf
    init = services["cluster-init"]
    assert "cluster" in _profiles(init) and init["restart"] == "no"
    assert {n: c["condition"] for n, c in init["depends_on"].items()} == dict.fromkeys(nodes, "service_healthy")
    command = _flat(init["command"])
    assert "--cluster create" in command and "--cluster-replicas 1" in command and "--cluster-yes" in command
    assert "for n in 1 2 3 4 5 6" in command and "redis-node-$$n" in command  # $$: a literal $ for sh


@pytest.mark.parametrize(("service", "url", "profile"), [
    ("demo", "redis://redis:6379/0", "demo"),
    ("demo-cluster", "redis://redis-node-1:6379/0?cluster=true", "cluster"),
])  # fmt: skip
def test_the_demo_services_run_a_command_that_parses(compose, service, url, profile):
    s = compose["services"][service]
    assert profile in _profiles(s)
    script = _flat(s["command"])
    assert "pip install" in script
    argv = shlex.split(script[script.index("contextstore ") :])[1:]
    verb = argv.index("demo")  # global options, the verb, its options
    top = cli.make_context("contextstore", argv[:verb])
    sub = cli.commands["demo"].make_context("demo", argv[verb + 1 :], parent=top)
    assert top.params["url"] == url and sub.params["workers"] == 4
    target = "cluster-init" if profile == "cluster" else "redis"
    assert target in s["depends_on"]
