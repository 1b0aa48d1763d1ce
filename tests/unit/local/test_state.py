"""Where the local stack keeps its state and finds the DAGs: from the environment or the working directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_kerr.local.state import DAGS_FOLDER_ENV, dags_folder, state_dir


def test_state_dir_is_kerr_home_else_dot_kerr(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KERR_HOME", raising=False)
    assert state_dir() == tmp_path / ".kerr"
    monkeypatch.setenv("KERR_HOME", str(tmp_path / "elsewhere"))
    assert state_dir() == tmp_path / "elsewhere"


def test_dags_folder_prefers_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "dags").mkdir()
    (tmp_path / "mine").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(DAGS_FOLDER_ENV, "mine")
    assert dags_folder() == tmp_path / "mine"
    assert dags_folder().is_absolute()


def test_dags_folder_is_dot_dags_when_the_environment_is_unset(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "dags").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(DAGS_FOLDER_ENV, raising=False)
    assert dags_folder() == tmp_path / "dags"


def test_no_dags_folder_names_both_places(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(DAGS_FOLDER_ENV, raising=False)
    with pytest.raises(FileNotFoundError, match=DAGS_FOLDER_ENV) as unset:
        dags_folder()
    assert str(tmp_path / "dags") in str(unset.value)
    monkeypatch.setenv(DAGS_FOLDER_ENV, str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="not a folder") as missing:
        dags_folder()
    assert str(tmp_path / "missing") in str(missing.value) and str(tmp_path / "dags") in str(missing.value)
