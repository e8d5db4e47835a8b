"""Item files read back by each format's standard reader, as a user would read them.

Each reader fails (raises) on a file that reader cannot open: these are the checks that
a file is whole, not lenient parsers of hashcrawl's own.
"""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The item formats, by the endings -o reads, each with one file name to write it to.
FORMATS = ("jsonl", "json", "csv", "xml", "parquet")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def read_json(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as file:
        items: list[dict[str, Any]] = json.load(file)
    return items


def read_csv(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8", newline="") as file:
        return list(csv.DictReader(file))


def read_xml(path: Path) -> list[dict[str, Any]]:
    """Each ``<item>`` as a dict of its fields' text (a list's ``<value>``s as a list)."""
    root = ET.parse(path).getroot()
    assert root.tag == "items", root.tag
    return [{field.tag: _xml_value(field) for field in item} for item in root]


def _xml_value(field: ET.Element) -> Any:
    children = list(field)
    if children and all(child.tag == "value" for child in children):
        return [child.text or "" for child in children]
    return field.text or ""


def read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    return rows


READERS: dict[str, Callable[[Path], list[dict[str, Any]]]] = {
    "jsonl": read_jsonl,
    "json": read_json,
    "csv": read_csv,
    "xml": read_xml,
    "parquet": read_parquet,
}


def read_items(path: Path) -> list[dict[str, Any]]:
    """The items of ``path`` by its format's standard reader (chosen by its ending)."""
    return READERS[path.suffix.lstrip(".")](path)


def item_set(path: Path, root: str) -> set[str]:
    """The distinct items of ``path`` as its standard reader gives them, each as canonical
    JSON text with the site root ``root`` written ``SITE/``: two crawls of one loopback
    site, each on a port of its own, give equal sets for equal items. Nothing else is
    normalised (CSV's and XML's strings stay strings)."""
    return {json.dumps(item, sort_keys=True).replace(root, "SITE/") for item in read_items(path)}
