"""``make ui``'s connections live in the metadata DB, where the Connections page can show and edit them."""

from __future__ import annotations

import configparser
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from airflow_kerr.local.airflow_env import airflow_environment, connection_records, store_connections
from airflow_kerr.local.broker import connection_variables

IDS = {"kafka_default", "spark_default", "kafka_connect_default"}


def environment(home: Path, stored: Any = IDS) -> dict[str, str]:
    return airflow_environment(
        home,
        host="127.0.0.1",
        port=8080,
        password_file=home / "passwords.json",
        dags=home / "dags",
        stored_connections=stored,
    )


def test_connection_records_are_the_three_connections_with_their_extra_as_json_text() -> None:
    records = connection_records(connection_variables("127.0.0.1:19092", "127.0.0.1", 18083))

    assert records == {
        "kafka_default": {"conn_type": "kafka", "extra": json.dumps({"bootstrap.servers": "127.0.0.1:19092"})},
        "spark_default": {"conn_type": "spark", "host": "local[2]"},
        "kafka_connect_default": {"conn_type": "kafka_connect", "host": "127.0.0.1", "port": 18083, "schema": "http"},
    }


def test_connection_records_refuse_a_variable_that_is_no_connection() -> None:
    with pytest.raises(ValueError, match="AIRFLOW_VAR_X is not an AIRFLOW_CONN_"):
        connection_records({"AIRFLOW_VAR_X": "{}"})


def test_an_inherited_variable_for_a_stored_connection_is_dropped_and_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment is looked up before the DB: an inherited kafka_default would hide the row."""
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", '{"conn_type": "kafka"}')
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark"}')
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT", '{"conn_type": "smtp"}')

    env = environment(tmp_path)

    assert not {"AIRFLOW_CONN_KAFKA_DEFAULT", "AIRFLOW_CONN_SPARK_DEFAULT", "AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT"} & set(
        env
    )
    assert env["AIRFLOW_CONN_SMTP_DEFAULT"] == '{"conn_type": "smtp"}', "a connection we do not store is left alone"
    assert "AIRFLOW_CONN_KAFKA_DEFAULT" in environment(tmp_path, stored=())


def stored_rows(home: Path) -> dict[str, dict[str, Any]]:
    """The connection rows of the SQLite metadata DB, extras decrypted with the home's Fernet key."""
    from cryptography.fernet import Fernet

    config = configparser.ConfigParser(interpolation=None)
    config.read(home / "airflow.cfg")
    fernet = Fernet(config["core"]["fernet_key"].encode())
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute("SELECT conn_id, conn_type, host, port, extra, is_extra_encrypted FROM connection").fetchall()
    return {
        conn_id: {
            "conn_type": conn_type,
            "host": host,
            "port": port,
            "extra": json.loads(fernet.decrypt(extra.encode()) if encrypted else extra) if extra else None,
        }
        for conn_id, conn_type, host, port, extra, encrypted in rows
    }


@pytest.mark.airflow
def test_a_second_start_on_the_same_state_points_the_rows_at_its_new_ports(tmp_path: Path) -> None:
    """Two ``make ui`` runs on one state directory: the rows are created, then updated, never duplicated."""
    home = tmp_path / "airflow"
    home.mkdir()
    env = environment(home)
    log = tmp_path / "standalone.log"

    for bootstrap, connect_port in (("127.0.0.1:19092", 18083), ("127.0.0.1:29092", 28083)):
        records = connection_records(connection_variables(bootstrap, "127.0.0.1", connect_port))
        store_connections(env, records, log, timeout_s=240)
        rows = stored_rows(home)
        assert set(rows) == IDS, log.read_text()[-2000:]
        assert rows["kafka_default"]["extra"] == {"bootstrap.servers": bootstrap}
        assert rows["kafka_connect_default"] == {
            "conn_type": "kafka_connect",
            "host": "127.0.0.1",
            "port": connect_port,
            "extra": None,
        }
        assert rows["spark_default"]["host"] == "local[2]"
    assert not (tmp_path / "kerr-connections.json").exists(), "the import file is removed once imported"
