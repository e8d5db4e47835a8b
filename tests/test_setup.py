"""Tests of what a new user runs before any crawl: scripts/test and the package's metadata."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

from testing.fleet import ITEM_FIELDS

REPO = Path(__file__).resolve().parent.parent


def test_scripts_test_help_shows_help_without_installing_anything(tmp_path: Path) -> None:
    """``scripts/test --help`` in a fresh clone says what it does and makes no .venv."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "test", tmp_path / "scripts" / "test")
    done = subprocess.run(
        [str(tmp_path / "scripts" / "test"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PIP_NO_INDEX": "1"},
    )
    assert done.returncode == 0, done
    assert done.stdout.startswith("usage: scripts/test [PYTEST ARGUMENTS]")
    assert not (tmp_path / ".venv").exists()


def test_the_license_is_an_spdx_expression_setuptools_reads_without_a_warning() -> None:
    """``project.license`` as a table is deprecated by setuptools 77 (a warning box on
    every install); an SPDX string needs setuptools 77 to build."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    assert project["build-system"]["requires"] == ["setuptools>=77"]


def test_the_readme_names_every_field_of_an_item() -> None:
    """The README's first crawl lists the fields a page's item has, all of them."""
    text = " ".join((REPO / "README.md").read_text().split())
    listed = re.search(r"with its fields: ([a-z_, ]+?) and ([a-z_]+)\.", text)
    assert listed is not None
    assert {*listed.group(1).split(", "), listed.group(2)} == ITEM_FIELDS
