"""What each mutant's killers read, so that a later ``scripts/mutants --cache DIR`` run
redoes only the mutants whose inputs changed.

A verdict (killed by what, or survived) depends on the files the killers' processes read
and on the machine's tools. What is read is recorded, not guessed: a ``sitecustomize``
module in the mutant's tree (first on ``PYTHONPATH``, so every Python process a killer
starts imports it, subprocesses included) writes, at exit, the tree's files among its
imported modules. To these go every file of the tree that is not Python (the Lua
scripts, ``pyproject.toml``, data), read as they are by path. A verdict is reused only
when every one of those files has the text it had, the mutant's own file included (with
the mutant applied), and the run's killers, stages, seed, Python, installed packages and
``redis-server`` are the same. A killer that outlived its ceiling wrote nothing and is
never cached; neither is a verdict whose record is missing.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

HOOK = '''"""Written by scripts/mutants --cache: records which of the tree's files were imported."""
import atexit
import os
import sys


def _record() -> None:
    root, out = os.environ.get("MUTANT_TREE"), os.environ.get("MUTANT_DEPS")
    if not root or not out:
        return
    files = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
    mine = sorted(os.path.relpath(f, root) for f in files if f and f.startswith(root + os.sep))
    with open(out, "a") as f:
        f.write("".join(p + "\\n" for p in mine))


atexit.register(_record)
'''


@functools.cache
def environment(killers: tuple[str, ...], stages: tuple[str, ...], seed: int) -> str:
    """Everything outside the tree a verdict depends on, as one hash."""
    packages = sorted(
        f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
    )
    redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    parts = [sys.version, redis, *packages, "|", *killers, "|", *stages, str(seed)]
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()


def arm(tree: Path) -> Path:
    """Put the hook in ``tree``; returns the file its processes write to."""
    (tree / "sitecustomize.py").write_text(HOOK)
    deps = tree.parent / f"{tree.name}.deps"
    deps.unlink(missing_ok=True)
    return deps


def read_set(tree: Path, deps: Path, snapshot: Path) -> dict[str, str] | None:
    """Each file the killers read (relative path -> hash of its text in ``tree``), or None
    if no process recorded its imports. The files that are not Python are those of the
    ``snapshot`` the tree was copied from (not what the killers wrote there)."""
    if not deps.exists():
        return None
    names = {n for n in deps.read_text().split("\n") if n and n != "sitecustomize.py"}
    names |= {str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if _data(p)}
    return {n: _hash((tree / n).read_bytes()) for n in sorted(names) if (tree / n).is_file()}


def _data(path: Path) -> bool:
    return path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts


def _hash(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def store(
    cache: Path, mutant_id: str, env: str, read: dict[str, str], verdict: dict[str, str]
) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    record = {"env": env, "read": read, **verdict}
    (cache / f"{mutant_id}.json").write_text(json.dumps(record, indent=0, sort_keys=True))


def lookup(
    cache: Path, mutant_id: str, env: str, root: Path, mutated: tuple[str, str]
) -> dict[str, str] | None:
    """The verdict stored for ``mutant_id`` if nothing it read has changed since: files
    are read from ``root`` (the run's snapshot), but ``mutated`` (path, the mutant's
    text of it) stands for that file."""
    path = cache / f"{mutant_id}.json"
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    if record.get("env") != env:
        return None
    for name, digest in record["read"].items():
        if name == mutated[0]:
            current = _hash(mutated[1].encode())
        elif (root / name).is_file():
            current = _hash((root / name).read_bytes())
        else:
            return None
        if current != digest:
            return None
    return {"killed_by": record["killed_by"], "stage": record["stage"]}
