"""docs/api.md's tables of settings, made from their one declaration in ``_settings``.

``tests/test_docs.py`` checks that the page holds exactly what these functions make;
``python -m testing.apidocs`` rewrites the page's copies after a setting changes.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import attrs

from hashcrawl._core._flags import Flag, flag_name
from hashcrawl._core._settings import Settings
from hashcrawl._version import __version__

API = Path(__file__).resolve().parent.parent / "docs" / "api.md"
ROW_START = "| `--"  # a worker flag's row; the hand-written rows above it (`-o`) are left


def _default(field: attrs.Attribute[Any]) -> str:
    flag: Flag = field.metadata["flag"]
    if flag.parse is None:
        return "off"
    if field.default in (None, ()):
        return "none"
    text = str(field.default).replace(__version__, "VERSION")
    return f"`{text}`"


def _setting(field: attrs.Attribute[Any]) -> str:
    flag: Flag = field.metadata["flag"]
    if flag.parse is None:
        return f"`{field.name}={not flag.negate}`"
    return f"`{field.name}`"


def flag_rows() -> list[str]:
    """One row per setting: the flag, its default, the field, its help."""
    rows = []
    for field in attrs.fields(Settings):
        flag: Flag = field.metadata["flag"]
        shown = flag_name(field) + (f" {flag.metavar}" if flag.metavar else "")
        cells = [f"`{shown}`", _default(field), _setting(field), flag.help.replace("|", "\\|")]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def signature() -> str:
    """``Settings``'s signature as the page shows it, wrapped."""
    parts = []
    for field in attrs.fields(Settings):
        value = "..." if field.name == "user_agent" else repr(field.default)
        parts.append(f"{field.name}={value}".replace("'", '"'))
    text = "hashcrawl.Settings(*, " + ", ".join(parts) + ")"
    lines = textwrap.wrap(text, width=88, subsequent_indent=" " * 19, break_on_hyphens=False)
    return "\n".join(lines)


def page_rows(text: str) -> list[str]:
    """The worker-flag rows of the page's ``### Worker flags`` table."""
    section = text.split("\n### Worker flags\n", 1)[1].split("\n### ", 1)[0]
    return [line for line in section.splitlines() if line.startswith(ROW_START)]


def page_signature(text: str) -> str:
    return text.split("## `Settings`\n\n```\n", 1)[1].split("\n```", 1)[0]


def rewrite(text: str) -> str:
    """The page with both copies made afresh."""
    rows = page_rows(text)
    start = text.index(rows[0])
    end = text.index(rows[-1]) + len(rows[-1])
    text = text[:start] + "\n".join(flag_rows()) + text[end:]
    old = page_signature(text)
    return text.replace(old, signature(), 1)


if __name__ == "__main__":
    API.write_text(rewrite(API.read_text()))
    print(re.sub(r"\s+", " ", f"rewrote {API}"))
