"""Regenerate ``librdkafka-properties.txt``: every configuration property of the installed librdkafka.

Run ``python tests/unit/errors/data/dump_librdkafka_properties.py > tests/unit/errors/data/librdkafka-properties.txt``.

The names come from ``rd_kafka_conf_properties_show()``, the table librdkafka's
CONFIGURATION.md is generated from, read from the librdkafka bundled with
confluent-kafka. Whether a property is sensitive is asked of the library itself: a
client is created with only that property set and ``debug=conf``, and librdkafka's
configuration dump redacts the properties it flags ``_RK_SENSITIVE`` (``src/rdkafka_conf.c``).
Properties set through a dedicated C API (``ssl_key``, callbacks) cannot be set from
Python, nor can a few whose every probe value is refused (a keystore path, say); their
flag is taken from that source file and marked so.
"""

from __future__ import annotations

import ctypes
import glob
import logging
import os
import re
import tempfile

import confluent_kafka
from confluent_kafka import Producer

#: The properties src/rdkafka_conf.c flags _RK_SENSITIVE, for those the probe cannot set.
SENSITIVE_BY_SOURCE = {
    "ssl.key.location",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl_key",
    "ssl.ca.pem",
    "ssl.keystore.password",
    "sasl.username",
    "sasl.password",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.assertion.private.key.file",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem",
}
ROW = re.compile(r"^([A-Za-z0-9_.]+)\s*\|\s*[CP*]\s*\|([^|]*)\|.*\*Type: ([^*]+)\*\s*$")


def _library() -> ctypes.CDLL:
    libs = os.path.join(os.path.dirname(confluent_kafka.__file__), os.pardir, "confluent_kafka.libs")
    return ctypes.CDLL(glob.glob(os.path.join(libs, "librdkafka*.so*"))[0])


def _table(lib: ctypes.CDLL) -> str:
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_conf_properties_show.argtypes = [ctypes.c_void_p]
    with tempfile.NamedTemporaryFile(suffix=".md") as out:
        handle = libc.fopen(out.name.encode(), b"w")
        lib.rd_kafka_conf_properties_show(handle)
        libc.fclose(handle)
        return open(out.name, encoding="utf-8").read()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _redacted(prop: str, value: str) -> str | None:
    """``yes``/``no`` as librdkafka's own configuration dump treats ``prop``; ``None`` if it refuses ``value``."""
    logger = logging.getLogger(f"probe.{prop}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = _Lines()
    logger.addHandler(handler)
    try:
        Producer({"bootstrap.servers": "127.0.0.1:1", "debug": "conf", prop: value}, logger=logger).flush(0)
    except Exception:
        return None
    return "yes" if any("[redacted]" in line for line in handler.lines) else "no"


def main() -> None:
    lib = _library()
    lib.rd_kafka_version_str.restype = ctypes.c_char_p
    version = lib.rd_kafka_version_str().decode()
    print(f"# librdkafka {version} configuration properties (confluent-kafka {confluent_kafka.__version__}),")
    print("# from rd_kafka_conf_properties_show(), the table CONFIGURATION.md is generated from.")
    print("# Columns: name, type, sensitive: 'yes' when librdkafka redacts the property in its own")
    print("# configuration dump (_RK_SENSITIVE), 'no' otherwise; 'yes*' / 'no*' for a property the probe")
    print("# cannot set (C API only, or every probe value refused), flagged from src/rdkafka_conf.c.")
    print("# Regenerate with dump_librdkafka_properties.py in this folder.")
    seen: set[str] = set()
    for line in _table(lib).splitlines():
        match = ROW.match(line)
        if not match or match.group(1) in seen:
            continue
        name, choices, kind = match.group(1), match.group(2).strip(), match.group(3).strip()
        seen.add(name)
        print(f"{name}\t{kind}\t{_sensitive(name, kind, choices)}")


def _sensitive(name: str, kind: str, choices: str) -> str:
    """Only text properties can hold a secret; each is probed with values until librdkafka takes one."""
    if kind in ("string", "CSV flags", "pattern list"):
        for value in ("x", choices.split(",")[0].strip(), os.devnull):
            found = _redacted(name, value) if value else None
            if found is not None:
                return found
    elif "API" not in kind:
        return "no"
    return "yes*" if name in SENSITIVE_BY_SOURCE else "no*"


if __name__ == "__main__":
    main()
