"""The layers of the package hold: the core imports no IO, no import cycle, each layer
imports only the layers below it (docs/design.md draws them)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hashcrawl"
IO = ("redis", "trio", "httpx", "lxml")
ROOT = "root"  # the package's own top-level modules: _exceptions and _version, the ground floor
# Which layers each layer may import (itself always). hashcrawl/__init__.py and
# __main__.py are the entrances: they may import anything.
MAY_IMPORT = {
    ROOT: set(),
    "_core": {ROOT},
    "_store": {ROOT, "_core"},
    "_web": {ROOT, "_core"},
    "_spiders": {ROOT, "_core", "_web"},
    "_output": {ROOT, "_core", "_web"},
    "_browser": {ROOT, "_core", "_web"},
    "_run": {ROOT, "_core", "_store", "_web", "_spiders", "_output", "_browser"},
    "_cli": {ROOT, "_core", "_store", "_web", "_spiders", "_output", "_browser", "_run"},
}
ENTRANCES = {"hashcrawl", "hashcrawl.__main__"}


def module_files(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of ``package`` (the package by default) by dotted name, a package by
    its own name."""
    found = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported_names(path: Path) -> Iterator[str]:
    """Every name an ``import`` or ``from`` anywhere in ``path`` brings in (at the top,
    under ``if TYPE_CHECKING``, inside functions), each ``from`` name as ``module.name``."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = parts[:-1]  # what a relative import starts from
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of ``package`` -> the modules of it that it imports."""
    files = module_files(package)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        graph[name] = {
            target
            for imported in imported_names(path)
            if (target := _module_of(imported, files)) is not None and target != name
        }
    return graph


def _module_of(imported: str, files: dict[str, Path]) -> str | None:
    """The package module ``imported`` names or lies in; None outside the package."""
    while imported not in files:
        if "." not in imported:
            return None
        imported = imported.rpartition(".")[0]
    return imported


def layer_of(module: str) -> str | None:
    """``_core``, ``_store``, ... or ``root``; None for an entrance."""
    if module in ENTRANCES:
        return None
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else ROOT


def cycle_in(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph``, as the modules round it; None if it has none."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(graph[node]):
            found = visit(target)
            if found is not None:
                return found
        path.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        found = visit(start)
        if found is not None:
            return found
    return None


CORE = sorted(m for m in module_files() if layer_of(m) == "_core")


def test_the_core_loads_no_io_library() -> None:
    """Importing every core module in a fresh interpreter loads none of redis, trio,
    httpx and lxml, even through the modules they import (one interpreter for all: what
    none of them loads, each of them does not)."""
    script = (
        f"import importlib, sys\nfor m in {CORE!r}: importlib.import_module(m)\n"
        f"print(' '.join(sorted(set(sys.modules) & set({IO!r}))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == [], f"the core loads {done.stdout.strip()}"


def test_the_io_check_sees_an_io_library_loaded() -> None:
    """The check above could fail: a module that does load one is seen to."""
    script = f"import sys, hashcrawl._run._worker; print(set(sys.modules) >= set({IO!r}))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "True"


def test_the_core_names_an_io_library_only_for_types() -> None:
    """No import under hashcrawl/_core names an IO library, but for the one type-only
    import of lxml's element type in ``_links`` (``_web._html`` parses, and hands over
    the elements): a new import of one anywhere in the core fails here."""
    named = {
        (module, imported.partition(".")[0], imported in type_only_names(module))
        for module in CORE
        for imported in imported_names(module_files()[module])
        if imported.partition(".")[0] in IO
    }
    assert named == {("hashcrawl._core._links", "lxml", True)}, named


def type_only_names(module: str) -> set[str]:
    """What the ``if TYPE_CHECKING:`` blocks of ``module`` import."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(module_files()[module].read_text())):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for inner in node.body:
                if isinstance(inner, ast.Import):
                    names.update(alias.name for alias in inner.names)
                elif isinstance(inner, ast.ImportFrom) and inner.module is not None:
                    names.add(inner.module)
                    names.update(f"{inner.module}.{alias.name}" for alias in inner.names)
    return names


def test_the_package_has_no_import_cycle() -> None:
    """Counting type-only and function-local imports, no module imports itself back."""
    assert cycle_in(import_graph()) is None, " -> ".join(cycle_in(import_graph()) or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check above could fail: a graph with a loop has one found."""
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b"}, "b": set()}) is None


def test_each_layer_imports_only_the_layers_below_it() -> None:
    """The core and the root modules import only each other; the store and the web, only
    those; the browser, those and the web; the worker, not the command line (see
    docs/design.md)."""
    wrong = []
    for module, targets in import_graph().items():
        layer = layer_of(module)
        if layer is None:
            continue
        for target in targets:
            other = layer_of(target)
            if other is not None and other != layer and other not in MAY_IMPORT[layer]:
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_every_module_belongs_to_a_layer() -> None:
    """A new folder under hashcrawl/ gets its rule here, and its line in docs/design.md."""
    layers = {layer_of(m) for m in module_files()} - {None}
    assert layers == set(MAY_IMPORT)


MODULE_LINES = 500
CLASS_LINES = 350
# Under 150: the session builds its parts and makes the few decisions that read more than
# one of them (issue 45); under 200: the handler
# does what the core's response policy decides (_core/_respond.py) and runs the
# callbacks, nothing more.
FACADE_LINES = {"hashcrawl._core._session.Session": 149, "hashcrawl._run._handler.Handler": 199}


def sizes() -> Iterator[tuple[str, int, int]]:
    """Each module of the package and each class in one, by dotted name: its lines and
    the limit it must keep."""
    for name, path in sorted(module_files().items()):
        text = path.read_text()
        yield name, len(text.splitlines()), MODULE_LINES
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.ClassDef):
                dotted = f"{name}.{node.name}"
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                yield dotted, lines, FACADE_LINES.get(dotted, CLASS_LINES)


def test_no_module_or_class_is_over_its_size_limit() -> None:
    """No module over 500 lines, no class over 350, the Session under 150 and the
    Handler under 200: a reader can hold each in mind, and a part that grows gets a
    module of its own."""
    over = [f"{name}: {lines} lines > {limit}" for name, lines, limit in sizes() if lines > limit]
    assert over == []


# What the driver layer knows of the core: the paths it reads or writes on a session
# (``session.gate.next_fetch``, ``session.epochs.latest``: a part's name and its member),
# also through a name bound to one (``intake = session.intake``); and the members it uses
# of the core objects it holds: one a session's part hands out (``applying =
# session.handover.apply(now)``), one it builds from a core class (``page = Page(...)``)
# or takes as a parameter of a core class (``page: Page``); the objects being the session's
# parts and the core's processes (what has a ``next_step``). A core value (a step, an
# entry, a batch) is data the core hands out, not interface: its fields are not counted.
# Each name counted once however often it is used, so a shape the core's processes share
# (``next_step``, ``answered``) is learnt once. h11's driver needs about 4 names of its
# Connection, Scrapy's engine 5 of its scheduler. Ours: ``start`` (every turn, a value
# naming it), the process protocol (``next_step``, ``answered``, ``failed``, ``result``),
# the state (``due``, ``figures``, ``stop``, ``take_settings``), and a page's own
# (``held``, ``ended``, and the gate's questions a request asks as it is written:
# ``may_send``, ``sub_request``, ``sub_request_ended``).
CORE_NAMES = 14


def _chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None if it does not start at a name."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return [node.id, *reversed(names)] if isinstance(node, ast.Name) else None


def core_objects() -> set[str]:
    """The classes of the session's parts (``self.gate = Gate(...)`` in ``Session``) and
    of the core's processes (a class with ``next_step``: a page, an epoch applying)."""
    found, classes = set(), []
    for path in (PACKAGE / "_core").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            classes.append(node)
            methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            if "next_step" in methods:
                found.add(node.name)
            if node.name == "Session":
                for call in ast.walk(node):
                    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
                        found.add(call.func.id)
    processes = {c.name for c in classes if "next_step" in ast.unparse(c)}
    while True:  # and what inherits a process's next_step
        more = {c.name for c in classes if {ast.unparse(b) for b in c.bases} & processes}
        if more <= processes:
            return (found | processes) - values()
        processes |= more


def values() -> set[str]:
    """The core's frozen classes and named tuples: values it hands out, whose fields
    are data."""
    return {
        node.name
        for path in (PACKAGE / "_core").glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        and (
            any("frozen" in ast.unparse(d) for d in node.decorator_list)
            or any(ast.unparse(b) == "NamedTuple" for b in node.bases)
        )
    }


def core_returns() -> dict[str, set[str]]:
    """Each method name of the core's classes -> the names in its return annotations."""
    found: dict[str, set[str]] = {}
    for path in (PACKAGE / "_core").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.returns is not None:
                words = set(re.findall(r"\w+", ast.unparse(node.returns)))
                found.setdefault(node.name, set()).update(words)
    return found


def _session_path(names: list[str]) -> str | None:
    """The session path ``names`` uses (its two names after ``session``), if any."""
    if "session" in names:
        i = names.index("session")
        if len(names) > i + 1:
            return ".".join(names[i + 1 : i + 3])
    return None


def _holders(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, objects: set[str], returns: dict[str, set[str]]
) -> dict[str, str]:
    """The names ``fn`` binds to the session's paths ("path") or to core objects
    ("object"): built from a core class, handed out by a session's part (a method whose
    return annotation names a core object), or a parameter annotated with a core class."""
    held = {}
    for arg in fn.args.args + fn.args.kwonlyargs:
        if arg.annotation is not None and ast.unparse(arg.annotation) in objects:
            held[arg.arg] = "object"
    for node in ast.walk(fn):
        value, targets = None, []
        if isinstance(node, ast.Assign):
            value, targets = node.value, node.targets
        elif isinstance(node, ast.NamedExpr):
            value, targets = node.value, [node.target]
        if value is None:
            continue
        pairs = []
        for target in targets:
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                pairs += list(zip(target.elts, value.elts, strict=False))
            else:
                pairs.append((target, value))
        for name, expr in pairs:
            if not isinstance(name, ast.Name):
                continue
            call = expr.func if isinstance(expr, ast.Call) else None
            chain = _chain(call if call is not None else expr)
            if chain is None:
                continue
            handed = _session_path(chain) and returns.get(chain[-1], set()) & objects
            if call is not None and (chain[-1] in objects or handed):
                held[name.id] = "object"
            elif call is None and _session_path(chain):
                held[name.id] = "path:" + ".".join(chain[chain.index("session") + 1 :])
    return held


def _kept_by_self(tree: ast.Module, objects: set[str]) -> set[str]:
    """The attributes of ``self`` an ``__init__`` binds to a parameter annotated with a
    core class (``self.page = page``, ``page: Page``)."""
    kept = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or fn.name != "__init__":
            continue
        params = {
            a.arg for a in fn.args.args if a.annotation and ast.unparse(a.annotation) in objects
        }
        for node in ast.walk(fn):
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                pairs = [(target, node.value)]
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = list(zip(target.elts, node.value.elts, strict=False))
                for name, value in pairs:
                    if (
                        isinstance(name, ast.Attribute)
                        and isinstance(value, ast.Name)
                        and value.id in params
                    ):
                        kept.add(name.attr)
    return kept


def core_names_used(folder: Path = PACKAGE / "_run") -> dict[str, set[str]]:
    """Each core name the modules of ``folder`` use (see above) -> the modules using it."""
    objects, returns = core_objects(), core_returns()
    used: dict[str, set[str]] = {}
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text())
        kept = _kept_by_self(tree, objects)
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            held = _holders(fn, objects, returns)
            for node in ast.walk(fn):  # ``self.page.sub_request``: a core object kept
                names = _chain(node) if isinstance(node, ast.Attribute) else None
                if names and len(names) > 2 and names[0] == "self" and names[1] in kept:
                    used.setdefault(names[2], set()).add(path.name)
            inner = {id(n.value) for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
            inner |= {  # ``gate = session.gate``: counted where ``gate`` is used
                id(n.value)
                for n in ast.walk(fn)
                if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute)
                and all(isinstance(t, ast.Name) and held.get(t.id, "").startswith("path:")
                        for t in n.targets)
            }  # fmt: skip
            for node in ast.walk(fn):
                if not isinstance(node, ast.Attribute) or id(node) in inner:
                    continue
                names = _chain(node)
                if names is None:
                    continue
                kind = held.get(names[0], "")
                found = None
                if kind == "object" and names[0] != "self":
                    found = names[1]
                elif kind.startswith("path:"):
                    found = _session_path(["session", *kind[5:].split("."), *names[1:]])
                else:
                    found = _session_path(names)
                if found is not None:
                    used.setdefault(found, set()).add(path.name)
    return used


def test_the_count_finds_the_core_objects_a_driver_holds(tmp_path: Path) -> None:
    """The count above could miss nothing it claims to count: a part through the session,
    through a name bound to it, a process handed out, a page built or taken as a
    parameter, or kept by an object as it is built; a step's fields are not counted."""
    (tmp_path / "_loop.py").write_text(
        "async def turn(session, page: Page, step: Send):\n"
        "    gate = session.gate\n"
        "    gate.next_fetch(0)\n"
        "    session.epochs.latest.epoch\n"
        "    applying = session.handover.apply(0)\n"
        "    applying.next_step(0)\n"
        "    built = Page(None, None, 0)\n"
        "    built.ended(0)\n"
        "    page.answered(step.cookie, 0)\n"
        "class Pace:\n"
        "    def __init__(self, m, page: Page):\n"
        "        self.m, self.page = m, page\n"
        "    def turn(self):\n"
        "        self.page.sub_request(0)\n"
    )
    assert set(core_names_used(tmp_path)) == {
        "gate.next_fetch", "epochs.latest", "handover.apply", "next_step", "ended", "answered",
        "sub_request",
    }  # fmt: skip


def test_the_driver_uses_few_names_of_the_core() -> None:
    """The driver layer reaches the core through at most CORE_NAMES paths (see above)."""
    used = core_names_used()
    assert len(used) <= CORE_NAMES, "\n".join(f"{k}: {sorted(v)}" for k, v in sorted(used.items()))


def parts_holding_the_session(folder: Path = PACKAGE / "_core") -> list[str]:
    """Where a core module other than the session's own imports ``Session`` or takes a
    parameter named ``session``: a part that would hold (and read) the whole session."""
    found = []
    for path in sorted(folder.glob("*.py")):
        if path.name == "_session.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and any(a.name == "Session" for a in node.names):
                found.append(f"{path.name}:{node.lineno}: imports Session")
            if isinstance(node, ast.arg) and node.arg == "session":
                found.append(f"{path.name}:{node.lineno}: takes a session")
    return found


def test_no_part_of_the_core_holds_the_session() -> None:
    """Each part is given the parts it reads (``Gate(frontier=..., flight=...)``), never
    the session that builds it, so what a part depends on is in its signature."""
    assert parts_holding_the_session() == []


def test_a_part_holding_the_session_would_be_found(tmp_path: Path) -> None:
    """The check above could fail: a part taking a session is named."""
    (tmp_path / "_gate.py").write_text("class Gate:\n    def __init__(self, session): ...\n")
    assert parts_holding_the_session(tmp_path) == ["_gate.py:2: takes a session"]
