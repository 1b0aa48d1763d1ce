"""Every shell command shown on the docs site and in the README names something that exists, and ``kerr`` parses it.

The Python examples are files that ``test_docs.py`` imports or runs; the shell examples
(``make``, ``pip install`` with extras, ``kerr``, the docker files) are checked here, so
a renamed make target, a dropped extra or a changed CLI option fails a test rather than
a reader. ``kerr`` lines are parsed by the CLI's own parser, exactly as written, so an
option or a choice the CLI no longer takes fails. Commands of
other tools (``curl``, ``export``, ``airflow``, ``docker compose``) are left to those tools,
except that every file of this repository they name must exist.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

from airflow_kerr.local.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "guides").glob("*.md"))]
SHELL_BLOCK = re.compile(r"```(?:bash|sh|shell|console)\n(.*?)```", re.DOTALL)
ENV_PREFIX = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S+\s+)+")
#: Tools whose own commands this project does not own; the repository files they name are still checked.
OTHER_TOOLS = ("curl", "export", "airflow", "docker", "cp")


def shell_lines() -> list[tuple[str, str]]:
    """(page, command) for every command line of every shell block, comments and continuations joined."""
    found: list[tuple[str, str]] = []
    for page in PAGES:
        for block in SHELL_BLOCK.findall(page.read_text()):
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                command = line.split(" #", 1)[0].strip()
                if command and not command.startswith("#") and not command.startswith(("{", "}", '"', "'")):
                    found.append((page.relative_to(ROOT).as_posix(), ENV_PREFIX.sub("", command)))
    return found


COMMANDS = shell_lines()


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))


def extras() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def test_the_pages_show_shell_commands() -> None:
    """The check below has something to check: the install, make and kerr lines are all found."""
    words = {command.split()[0] for _, command in COMMANDS}

    assert {"make", "pip", "kerr"} <= words


@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[f"{p}: {c[:50]}" for p, c in COMMANDS])
def test_a_shown_command_names_what_exists(page: str, command: str) -> None:
    try:
        words = shlex.split(command)
    except ValueError:  # a quoted JSON body that goes on over the next lines (curl -d '{ ...)
        words = command.split()
    tool = words[0]
    if tool == "make":
        targets = [word for word in words[1:] if "=" not in word]
        assert set(targets) <= make_targets(), f"{page}: {command!r} names a make target the Makefile lacks"
    elif tool == "pip":
        for spec in words[2:]:
            named = set(re.findall(r"\[([^\]]*)\]", spec)[0].split(",")) if "[" in spec else set()
            assert named <= extras(), f"{page}: {command!r} names extras pyproject.toml lacks: {named - extras()}"
    elif tool == "kerr":
        try:
            parsed = build_parser().parse_args(words[1:])
        except SystemExit as exit_:
            pytest.fail(f"{page}: {command!r} does not parse (argparse exit {exit_.code})")
        assert callable(getattr(parsed, "func", None)), f"{page}: {command!r} names no subcommand"
    else:
        assert tool in OTHER_TOOLS, f"{page}: {command!r}: a command of an unknown tool; check it here"
    for word in words[1:]:
        if "/" in word and not word.startswith(("http", "$", "-")) and (ROOT / word.split("/")[0]).is_dir():
            assert (ROOT / word).exists() or word.endswith("/.env"), f"{page}: {command!r} names {word}, missing"
