"""docker/ checked without a Docker engine: the compose file and the Dockerfile must agree with each other and the repo.

Nothing here starts a container. What a broken deployment would show only at ``docker
compose up`` is checked from the files: floating image tags, a connection naming a host or
port no service has, a Spark or Kafka release that differs from the one the provider is
built against, an image that does not carry the provider or Java.
"""

from __future__ import annotations

import base64
import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
COMPOSE = DOCKER / "docker-compose.yml"
DOCKERFILE = DOCKER / "Dockerfile"
WORKER_DOCKERFILE = DOCKER / "spark-worker.Dockerfile"
CONNECT_PROPERTIES = DOCKER / "connect" / "connect-distributed.properties"
AIRFLOW_COMMANDS = {"api-server", "scheduler", "triggerer", "dag-processor"}
SPARK_MASTER = "org.apache.spark.deploy.master.Master"
SPARK_WORKER = "org.apache.spark.deploy.worker.Worker"
PROVIDER_CONNECTIONS = {
    "AIRFLOW_CONN_KAFKA_DEFAULT",
    "AIRFLOW_CONN_SPARK_DEFAULT",
    "AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT",
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict) and isinstance(loaded.get("services"), dict), "no services in docker-compose.yml"
    return loaded


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(compose["services"])


@pytest.fixture(scope="module")
def pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(key): str(value) for key, value in env.items()}


def _command(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return command.split() if isinstance(command, str) else [str(part) for part in command]


def _ports(service: dict[str, Any]) -> set[int]:
    """Ports the service listens on inside the network: expose, the container side of ports, Kafka's listeners."""
    found = {int(str(port).split("/")[0]) for port in service.get("expose") or []}
    for mapping in service.get("ports") or []:
        found.add(int(str(mapping).split("/")[0].rsplit(":", 1)[-1]))
    for listener in _environment(service).get("KAFKA_LISTENERS", "").split(","):
        if listener.strip():
            found.add(int(listener.rsplit(":", 1)[1]))
    return found


def _names(name: str, service: dict[str, Any]) -> set[str]:
    return {name, str(service.get("hostname", name))}


def _pinned_version(pin_name: str, requirements: list[str]) -> str:
    for requirement in requirements:
        match = re.fullmatch(rf"{re.escape(pin_name)}==([\w.]+)", requirement.replace(" ", ""))
        if match:
            return match.group(1)
    raise AssertionError(f"{pin_name} is not pinned with == in {requirements}")


def _image(services: dict[str, dict[str, Any]], name: str) -> tuple[str, str]:
    repository, _, tag = str(services[name]["image"]).rpartition(":")
    return repository, tag


def _connection_endpoints(variable: str, value: str) -> Iterator[tuple[str, int]]:
    """The (host, port) pairs a connection points at, per the provider's connection types."""
    try:
        conn = json.loads(value)
    except ValueError as exc:
        raise AssertionError(f"{variable} is not JSON: {exc}: {value!r}") from None
    conn_type = conn.get("conn_type")
    if conn_type == "kafka":
        servers = conn.get("extra", {}).get("bootstrap.servers", "")
        assert servers, f"{variable}: a kafka connection needs extra.bootstrap.servers"
        for server in servers.split(","):
            host, _, port = server.strip().rpartition(":")
            yield host, int(port)
    elif conn_type == "spark":
        master = urlsplit(conn["host"] if "://" in conn["host"] else f"spark://{conn['host']}")
        assert master.scheme == "spark", f"{variable}: the master URL should be spark://host:port, not {conn['host']}"
        assert master.hostname is not None
        yield master.hostname, int(master.port or conn.get("port") or 7077)
    elif conn_type == "kafka_connect":
        assert conn.get("schema") in ("http", "https"), f"{variable}: schema must be http or https"
        yield conn["host"], int(conn.get("port") or 8083)
    else:
        raise AssertionError(f"{variable}: conn_type {conn_type!r} is not one the provider uses")


def test_the_compose_file_has_every_part_of_the_deployment(services: dict[str, dict[str, Any]]) -> None:
    images = {name: str(service.get("image", "")) for name, service in services.items()}
    commands = {name: _command(service) for name, service in services.items()}

    kafka = [name for name, image in images.items() if image.startswith("apache/kafka:")]
    brokers = [name for name in kafka if "KAFKA_PROCESS_ROLES" in _environment(services[name])]
    assert brokers, "no apache/kafka broker service"
    for name in brokers:
        assert "controller" in _environment(services[name])["KAFKA_PROCESS_ROLES"], f"{name} is not in KRaft mode"
    assert not [name for name, image in images.items() if "zookeeper" in image], "KRaft needs no ZooKeeper"
    assert any(any(part.endswith("connect-distributed.sh") for part in command) for command in commands.values())
    assert any(image.startswith("apache/spark:") and SPARK_MASTER in commands[name] for name, image in images.items())
    workers = [name for name, command in commands.items() if SPARK_WORKER in command]
    assert workers, "no Spark worker service"
    for name in workers:
        dockerfile = DOCKER / services[name]["build"]["dockerfile"] if "build" in services[name] else None
        base = _from_images(dockerfile)[-1] if dockerfile else images[name]
        assert base.startswith("apache/spark:"), f"{name} does not run apache/spark but {base}"
    assert any(image.startswith("postgres:") for image in images.values())
    airflow = {command[0] for command in commands.values() if command and command[0] in AIRFLOW_COMMANDS}
    assert airflow == AIRFLOW_COMMANDS, f"Airflow components missing: {sorted(AIRFLOW_COMMANDS - airflow)}"


def test_every_image_is_pinned_to_a_version(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        image = str(service.get("image", ""))
        assert image, f"service {name} names no image"
        repository, _, tag = image.rpartition(":")
        assert repository and tag and "/" not in tag, f"service {name}: image {image!r} has no tag"
        assert "$" not in image, f"service {name}: image {image!r} depends on a variable"
        assert tag != "latest" and re.match(r"\d+(\.\d+)+", tag), f"service {name}: {image!r} is not a version"
    for dockerfile in (DOCKERFILE, WORKER_DOCKERFILE):
        for image in _from_images(dockerfile):
            assert re.search(r":\d+(\.\d+)+", image) and "latest" not in image, f"{dockerfile.name}: {image} not pinned"


def test_pinned_releases_match_the_provider(services: dict[str, dict[str, Any]], pyproject: dict[str, Any]) -> None:
    """Spark, Kafka and the built image must be the releases the provider and its Connect config expect."""
    pyspark = _pinned_version("pyspark", pyproject["project"]["optional-dependencies"]["spark"])
    masters = [name for name, s in services.items() if SPARK_MASTER in _command(s)]
    assert masters, "no Spark master"
    for name in masters:
        repository, tag = _image(services, name)
        assert repository == "apache/spark" and tag.split("-")[0] == pyspark, (
            f"{name} runs Spark {tag}, the provider's pyspark is {pyspark}: driver and cluster must be one release"
        )
    kafka = [name for name, s in services.items() if str(s["image"]).startswith("apache/kafka:")]
    kafka_tags = {_image(services, name)[1] for name in kafka}
    assert len(kafka_tags) == 1, f"the broker and Kafka Connect should run one Kafka release, found {kafka_tags}"
    plugin_path = _properties(CONNECT_PROPERTIES)["plugin.path"]
    assert f"connect-file-{kafka_tags.pop()}.jar" in plugin_path, f"plugin.path {plugin_path} is not the image's jar"
    # The package's one version source (pyproject.toml reads it from there: dynamic = ["version"]).
    from airflow_kerr import __version__ as version

    built = {str(s["image"]) for s in services.values() if "build" in s}
    assert built == {f"airflow-provider-kerr:{version}", f"airflow-provider-kerr-spark-worker:{version}"}, built
    master_image = str(services[masters[0]]["image"])
    assert _from_images(WORKER_DOCKERFILE) == [master_image], "the Spark worker must run the master's Spark image"


def test_the_spark_worker_gives_executors_the_drivers_python_and_the_jobs_libraries(
    services: dict[str, dict[str, Any]], pyproject: dict[str, Any]
) -> None:
    """PySpark executors run the interpreter the driver names, with the driver's Python minor version."""
    from packaging.requirements import Requirement

    text = WORKER_DOCKERFILE.read_text()
    airflow_python = re.search(r"FROM apache/airflow:[\d.]+-python(\d+\.\d+)", DOCKERFILE.read_text())
    assert airflow_python, "the Airflow image names no Python version"
    minor = airflow_python.group(1)
    assert f"apt-get install -y --no-install-recommends python{minor} python{minor}-venv" in text
    venv = re.search(rf"python{re.escape(minor)} -m venv (/[\w/.-]+)", text)
    assert venv, f"no Python {minor} environment for the executors"
    assert re.search(rf'ENV PATH="{re.escape(venv.group(1))}/bin:\$\{{PATH\}}"', text), (
        "the driver's PYSPARK_PYTHON ('python') must find the executors' Python first on PATH"
    )
    airflow_env = _environment(services["airflow-scheduler"])
    assert "PYSPARK_PYTHON=python" in DOCKERFILE.read_text() or airflow_env.get("PYSPARK_PYTHON") == "python"
    pins = dict(re.findall(r'"([\w-]+)==([\w.]+)"', text))
    wanted = {
        Requirement(r).name: Requirement(r)
        for r in [*pyproject["project"]["dependencies"], *pyproject["project"]["optional-dependencies"]["spark"]]
    }
    for name in ("confluent-kafka", "pyarrow", "pandas"):
        assert name in pins, f"the worker does not install {name}, which the job imports on the executors"
        assert wanted[name].specifier.contains(pins[name]), f"{name}=={pins[name]} is outside {wanted[name]}"


def test_connections_point_at_services_and_ports_the_file_defines(services: dict[str, dict[str, Any]]) -> None:
    by_name = {host: name for name, service in services.items() for host in _names(name, service)}
    seen: set[str] = set()
    for name, service in services.items():
        for variable, value in _environment(service).items():
            if not variable.startswith("AIRFLOW_CONN_"):
                continue
            seen.add(variable)
            for host, port in _connection_endpoints(variable, value):
                target = by_name.get(host)
                assert target, f"{name}: {variable} points at {host}, which is not a service ({sorted(services)})"
                ports = _ports(services[target])
                assert port in ports, f"{name}: {variable} points at {host}:{port}; {target} listens on {sorted(ports)}"
                advertised = _environment(services[target]).get("KAFKA_ADVERTISED_LISTENERS")
                if advertised:
                    assert f"//{host}:{port}" in advertised or any(
                        f"//{alias}:{port}" in advertised for alias in _names(target, services[target])
                    ), f"{target} does not advertise {host}:{port} ({advertised}): clients would be sent elsewhere"
    assert seen >= PROVIDER_CONNECTIONS, f"connections missing: {sorted(PROVIDER_CONNECTIONS - seen)}"


def test_airflow_uses_postgres_and_reaches_its_execution_api(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        env = _environment(service)
        if _command(service)[:1] and _command(service)[0] in AIRFLOW_COMMANDS:
            database = urlsplit(re.sub(r"\$\{[^}]*\}", "secret", env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]))
            assert database.scheme.startswith("postgresql"), f"{name} does not use Postgres"
            assert database.hostname in services and (database.port or 5432) in _ports(services[database.hostname])
            api = urlsplit(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
            assert api.hostname in services and api.port in _ports(services[api.hostname]), (
                f"{name}: the execution API {api.geturl()} is not a service port"
            )
            assert _command(services[api.hostname])[0] == "api-server"


def test_the_kafka_cluster_id_is_a_kraft_uuid(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        cluster_id = _environment(service).get("CLUSTER_ID")
        if cluster_id:
            assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16, f"{name}: CLUSTER_ID is not a base64 UUID"


def test_kafka_connect_listens_where_the_compose_file_says(services: dict[str, dict[str, Any]]) -> None:
    properties = _properties(CONNECT_PROPERTIES)
    port = int(properties["listeners"].rsplit(":", 1)[1])
    workers = [s for s in services.values() if any(p.endswith("connect-distributed.sh") for p in _command(s))]
    for worker in workers:
        assert port in _ports(worker) and int(properties["rest.advertised.port"]) == port
        assert properties["rest.advertised.host.name"] in {str(worker.get("hostname"))}
        host, _, broker_port = properties["bootstrap.servers"].rpartition(":")
        broker = services[host]
        assert int(broker_port) in _ports(broker), f"Connect's bootstrap.servers {host}:{broker_port} is not a listener"


def test_the_dockerfile_installs_the_provider_java_and_pyspark() -> None:
    text = DOCKERFILE.read_text()
    lines = " ".join(line.rstrip("\\").strip() for line in text.splitlines() if not line.lstrip().startswith("#"))
    copied = re.findall(r"COPY (?:--\S+ )*(.+?) (/\S+)", lines)
    sources = {source for sources, _ in copied for source in sources.split()}
    assert {"pyproject.toml", "README.md", "airflow_kerr"} <= sources, (
        f"the provider's sources are not copied: {copied}"
    )
    destinations = {destination.rstrip("/") for _, destination in copied}
    installs = re.findall(r"pip install [^&]*", lines)
    # The extras the copied provider is installed with: spark (pyspark, pinned with pyspark-client), slack
    # (dags/tolerance_guard.py, mounted into the image, alerts through the slack provider's notifier) and
    # messaging (dags/on_tolerance_recovery.py's watcher is common.messaging's MessageQueueTrigger).
    extras = {
        extra.strip()
        for install in installs
        for destination in destinations
        for found in re.findall(re.escape(destination) + r"\[([^\]]*)\]", install)
        for extra in found.split(",")
    }
    assert {"spark", "slack", "messaging"} <= extras, (
        f"the copied provider is not installed with its spark, slack and messaging extras: {installs}"
    )
    assert any('"apache-airflow==${AIRFLOW_VERSION}"' in install for install in installs), "pip may move Airflow"
    from_airflow = re.search(r"FROM apache/airflow:(\d+\.\d+\.\d+)-python(\d+\.\d+)", text)
    assert from_airflow, "the image is not built on apache/airflow"
    assert f"ARG AIRFLOW_VERSION={from_airflow.group(1)}" in text, "AIRFLOW_VERSION differs from the base image"
    java = re.search(r"COPY --from=\S+ (/\S+) (/\S+)", lines) or re.search(r"apt-get install[^&]*openjdk-17", lines)
    assert java, "no Java 17 in the image"
    assert re.search(r"ENV JAVA_HOME=/\S+", lines), "JAVA_HOME is not set"
    assert re.search(r"FROM eclipse-temurin:17\.", text) or "openjdk-17" in text, "Java is not release 17"


def test_the_build_context_keeps_the_sources_and_drops_the_rest() -> None:
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    assert "*" in ignore, "the repository root (with .venv) would be sent to the builder"
    for needed in ("!pyproject.toml", "!README.md", "!airflow_kerr/"):
        assert needed in ignore


def test_required_secrets_are_documented(compose: dict[str, Any]) -> None:
    required = set(re.findall(r"\$\{(\w+):\?", COMPOSE.read_text()))
    example = {line.split("=", 1)[0] for line in (DOCKER / ".env.example").read_text().splitlines() if "=" in line}
    assert required, "the compose file should demand its secrets rather than ship defaults"
    assert required <= example, f"not in docker/.env.example: {sorted(required - example)}"


def _from_images(dockerfile: Path) -> list[str]:
    """The images a Dockerfile's FROM lines name, in order (the last is the one it builds on)."""
    return [line.split()[1] for line in dockerfile.read_text().splitlines() if line.startswith("FROM ")]


def _properties(path: Path) -> dict[str, str]:
    entries = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            entries[key.strip()] = value.strip()
    return entries
