"""``scripts/mutants``: a mutation run over the coordination code, killed by the fast tests
and the crash simulation's quick profile.

    scripts/mutants --files 'hashcrawl/_store/lua/*.lua' --sample 60 --seed 1
    scripts/mutants --list                       # every mutant, nothing run

Which files are mutated, and which test modules kill their mutants, is read from
``simulations/mutants.toml`` (globs, so a file that moves or splits keeps its killers).
Python mutants are made by cosmic-ray's operators (``cosmic_ray.plugins``), applied with
``cosmic_ray.mutating.mutate_code``; Lua mutants by ``simulations.lua_mutants``.

Each mutant gets its own copy of the tree (hashcrawl, tests, testing, simulations), in a
temporary directory that comes first on ``PYTHONPATH``. Its killers run in order: the fast
test modules for its file (``pytest -x``: the first failing test is the killer), then, only
if every one passes, the quick profile (``python -m simulations --seed S --no-shrink``: the
first broken invariant is the killer). Each stage has a time ceiling; a mutant that
outlasts it is counted as killed by timeout, and the table says so. ``--stages sim`` runs
the quick profile alone, to measure what it catches by itself.

A mutant whose id is in ``simulations/mutants.toml``'s ``[equivalent]`` table and that
survives is reported as equivalent, with that table's one-line argument, and left out of
the kill rates. A mutant id is a hash of the file, the line's text and the change, so it
stays the same when lines above it move; the same change to a second line of the same
text gets that id hashed with its rank in the file (``distinct_ids``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import fnmatch
import hashlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import attrs

from simulations import lua_mutants, mutant_cache

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "simulations" / "mutants.toml"
COPIED = ("hashcrawl", "tests", "testing", "simulations", "pyproject.toml")
LIVE: set[subprocess.Popen[str]] = set()  # killers running now: stopped if the run is
SNAPSHOT = [ROOT]  # the tree mutants are copied from: a copy made when the run starts
SHARD_RUNS = 12  # runs of `python -m simulations.shards` per mutant (about 100 s of CPU)


@attrs.frozen
class Mutant:
    """One change to one file: ``apply`` turns the file's text into the mutant's."""

    id: str
    path: str
    line: int
    operator: str
    describe: Callable[[], str] = attrs.field(eq=False, repr=False)
    apply: Callable[[str], str | None] = attrs.field(eq=False, repr=False)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def change(self) -> str:
        """The changed part of the line: ``old -> new``."""
        return self.describe()


@attrs.frozen
class Outcome:
    """What became of one mutant: ``killed_by`` is empty when it survived."""

    mutant: Mutant
    killed_by: str
    stage: str  # "tests", "sim", "timeout", "invalid", or "" for a survivor
    seconds: float
    equivalent: str = ""


def mutant_id(path: str, old: str, new: str) -> str:
    return hashlib.sha1(f"{path}\0{old.strip()}\0{new.strip()}".encode()).hexdigest()[:8]


# ---------------------------------------------------------------- finding mutants


def load_config(path: Path = CONFIG) -> dict[str, object]:
    with path.open("rb") as f:
        return tomllib.load(f)


def targets(config: dict[str, object], files: Sequence[str]) -> list[tuple[Path, list[str]]]:
    """(file, its killer test modules) for every file the config's globs match, kept to
    those ``files`` (globs too) name when given."""
    found: dict[Path, list[str]] = {}
    for target in config["target"]:  # type: ignore[attr-defined]
        for path in sorted(ROOT.glob(target["glob"])):
            rel = str(path.relative_to(ROOT))
            if files and not any(fnmatch.fnmatch(rel, f) for f in files):
                continue
            found.setdefault(path, [])
            found[path] += [t for t in target["tests"] if t not in found[path]]
    return list(found.items())


def simulations_of(config: dict[str, object]) -> dict[str, str]:
    """The simulation each file's mutants meet when its target names one (``simulation =
    "shards"``: the sharded store's code, which the quick profile never runs)."""
    chosen: dict[str, str] = {}
    for target in config["target"]:  # type: ignore[attr-defined]
        if "simulation" in target:
            for path in ROOT.glob(target["glob"]):
                chosen[str(path.relative_to(ROOT))] = target["simulation"]
    return chosen


def mutants_of(path: Path, operators: Sequence[str]) -> list[Mutant]:
    if path.suffix == ".lua":
        return distinct_ids([_from_lua(m) for m in lua_mutants.mutants_of(path, ROOT)])
    return distinct_ids(python_mutants(path, operators))


def distinct_ids(found: list[Mutant]) -> list[Mutant]:
    """``found`` with the ids of the same change to the same line text made distinct: the
    first (highest in the file) keeps the plain id, so every id that never collided stays
    as the tables have it; the k-th repeat hashes that id with k."""
    seen: dict[str, int] = {}
    rank: dict[int, int] = {}
    for at in sorted(range(len(found)), key=lambda at: found[at].line):
        rank[at] = seen[found[at].id] = seen.get(found[at].id, 0) + 1
    return [  # in the order found: a seeded sample draws from this order
        m if rank[at] == 1 else attrs.evolve(m, id=_nth_id(m.id, rank[at]))
        for at, m in enumerate(found)
    ]


def _nth_id(first: str, k: int) -> str:
    return hashlib.sha1(f"{first}\0{k}".encode()).hexdigest()[:8]


def _from_lua(m: lua_mutants.LuaMutant) -> Mutant:
    return Mutant(
        id=mutant_id(m.path, m.old, m.new),
        path=m.path,
        line=m.line,
        operator=f"lua/{m.operator}",
        describe=lambda: m.change,
        apply=m.apply,
    )


def python_mutants(path: Path, operators: Sequence[str]) -> list[Mutant]:
    """cosmic-ray's mutants of one module, for the operators named, outside annotations
    (``from __future__ import annotations`` makes those strings nobody evaluates).

    Only finding them is done here; each mutant is made (``mutate_code``) when it runs,
    or when its change is printed.
    """
    import cosmic_ray.plugins
    from cosmic_ray.ast import ast_nodes, get_ast

    source = path.read_text()
    lines = source.split("\n")
    rel = str(path.relative_to(ROOT))
    found: list[Mutant] = []
    for name in operators:
        operator = cosmic_ray.plugins.get_operator(f"core/{name}")()
        occurrence = 0
        on_line: dict[int, int] = {}
        for node in ast_nodes(get_ast(source)):
            for start, _end in operator.mutation_positions(node):
                this, occurrence = occurrence, occurrence + 1
                if _in_annotation(node):
                    continue
                line = start[0]
                nth = on_line[line] = on_line.get(line, -1) + 1
                made = _Made(source, name, this, line)
                found.append(
                    Mutant(
                        id=mutant_id(rel, lines[line - 1], f"{name}:{nth}"),
                        path=rel,
                        line=line,
                        operator=f"py/{name}",
                        describe=made.change,
                        apply=made.apply,
                    )
                )
    return found


@attrs.define
class _Made:
    """One cosmic-ray mutant of a module, made on first use."""

    source: str
    operator: str
    occurrence: int
    line: int
    _text: str | None = None

    def apply(self, _old: str) -> str | None:
        import cosmic_ray.plugins
        from cosmic_ray.mutating import mutate_code

        if self._text is None:
            operator = cosmic_ray.plugins.get_operator(f"core/{self.operator}")()
            self._text = mutate_code(self.source, operator, self.occurrence) or ""
        return self._text or None

    def change(self) -> str:
        new = self.apply(self.source)
        if new is None:
            return "(no change)"
        old_line, new_line = _changed_line(self.source.split("\n"), new.split("\n"), self.line)
        return lua_mutants.diff(old_line, new_line)


def _changed_line(old: list[str], new: list[str], line: int) -> tuple[str, str]:
    if len(old) == len(new):
        return old[line - 1], new[line - 1]
    return old[line - 1], " ".join(n.strip() for n in new[line - 1 : line + len(new) - len(old)])


def _in_annotation(node: object) -> bool:
    child, parent = node, getattr(node, "parent", None)
    while parent is not None:
        kids = parent.children
        at = kids.index(child)
        values = [getattr(k, "value", None) for k in kids]
        if parent.type == "tfpdef" and ":" in values and at > values.index(":"):
            return True
        if parent.type == "annassign" and at == 1:
            return True
        if parent.type == "funcdef" and "->" in values and at == values.index("->") + 1:
            return True
        child, parent = parent, getattr(parent, "parent", None)
    return False


def sample(mutants: list[Mutant], n: int | None, seed: int) -> list[Mutant]:
    if n is None or n >= len(mutants):
        return mutants
    chosen = random.Random(seed).sample(mutants, n)
    return sorted(chosen, key=lambda m: (m.path, m.line, m.id))


# ---------------------------------------------------------------- running them


@attrs.frozen
class Plan:
    stages: tuple[str, ...]
    seed: int
    test_timeout: float
    sim_timeout: float
    equivalent: dict[str, str]
    cache: Path | None = None  # where verdicts are kept (simulations.mutant_cache)
    simulation: str = "quick"  # or "shards": python -m simulations.shards (SHARD_RUNS runs)
    # Files whose mutants meet another simulation than ``simulation`` (``simulations_of``).
    simulation_of: dict[str, str] = attrs.Factory(dict)

    def for_file(self, path: str) -> Plan:
        """This plan as it runs a mutant of ``path``."""
        simulation = self.simulation_of.get(path, self.simulation)
        return self if simulation == self.simulation else attrs.evolve(self, simulation=simulation)


def lua_invalid(mutants: Sequence[Mutant], workdir: Path) -> set[str]:
    """The ids of Lua mutants Redis would refuse to load (``SCRIPT LOAD`` fails)."""
    import redis

    from hashcrawl._store._server import RedisServer

    lua = [m for m in mutants if m.path.endswith(".lua")]
    if not lua:
        return set()
    bad: set[str] = set()
    with RedisServer(directory=workdir / "lua-check") as server:
        client = redis.Redis.from_url(server.url)
        for m in lua:
            text = m.apply((SNAPSHOT[0] / m.path).read_text())
            try:
                client.script_load(text or "")
            except redis.ResponseError:
                bad.add(m.id)
        client.close()
    return bad


def run_one(mutant: Mutant, tests: list[str], plan: Plan, workdir: Path) -> Outcome:
    started = time.monotonic()
    plan = plan.for_file(mutant.path)
    text = mutant.apply((SNAPSHOT[0] / mutant.path).read_text())
    if text is None:
        return Outcome(mutant, "no change", "invalid", 0.0)
    env = (
        mutant_cache.environment(tuple(tests), (*plan.stages, plan.simulation), plan.seed)
        if plan.cache
        else ""
    )
    if plan.cache is not None:
        found = mutant_cache.lookup(plan.cache, mutant.id, env, SNAPSHOT[0], (mutant.path, text))
        if found is not None:
            return _outcome(mutant, found["killed_by"], found["stage"], 0.0, plan, cached=True)
    tree = Path(tempfile.mkdtemp(prefix=f"mutant-{mutant.id}-", dir=workdir))
    try:
        _copy_tree(tree)
        deps = mutant_cache.arm(tree) if plan.cache is not None else None
        (tree / mutant.path).write_text(text)
        killed_by, stage = _kill(tree, tests, plan)
        read = None if deps is None else mutant_cache.read_set(tree, deps, SNAPSHOT[0])
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    if plan.cache is not None and read is not None and stage != "timeout":
        verdict = {"killed_by": killed_by, "stage": stage}
        mutant_cache.store(plan.cache, mutant.id, env, read, verdict)
    return _outcome(mutant, killed_by, stage, time.monotonic() - started, plan)


def _outcome(
    mutant: Mutant, killed_by: str, stage: str, seconds: float, plan: Plan, cached: bool = False
) -> Outcome:
    equivalent = plan.equivalent.get(mutant.id, "") if not killed_by else ""
    shown = f"{killed_by} (cached)" if cached and killed_by else killed_by
    return Outcome(mutant, shown, stage, seconds, equivalent)


def baseline(tests: list[str], plan: Plan, workdir: Path) -> str:
    """The unmutated tree through the same killers: what killed it, or "" (it must survive)."""
    tree = Path(tempfile.mkdtemp(prefix="mutant-baseline-", dir=workdir))
    try:
        _copy_tree(tree)
        where = _python(tree, ["-c", "import hashcrawl; print(hashcrawl.__file__)"], 60)
        if not where[1].strip().startswith(str(tree)):
            return f"the copy's hashcrawl is not the one imported: {where[1].strip()}"
        return _kill(tree, tests, plan)[0]
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def _kill(tree: Path, tests: list[str], plan: Plan) -> tuple[str, str]:
    if "tests" in plan.stages and tests:
        killed = _by_tests(tree, tests, plan.test_timeout)
        if killed:
            return killed, "timeout" if killed.startswith("timeout") else "tests"
    if "sim" in plan.stages:
        killed = _by_simulation(tree, plan.seed, plan.sim_timeout, plan.simulation)
        if killed:
            return killed, "timeout" if killed.startswith("timeout") else "sim"
    return "", ""


def _by_tests(tree: Path, tests: list[str], timeout: float) -> str:
    args = ["-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header", "-rf"]
    code, out = _python(tree, [*args, *(f"tests/{t}" for t in tests)], timeout)
    if code is None:
        return f"timeout: tests over {timeout:.0f} s"
    if code == 0:
        return ""
    failed = re.search(r"^FAILED (\S+)", out, re.MULTILINE)
    if failed:
        return failed.group(1)
    error = re.search(r"^ERROR (\S+)", out, re.MULTILINE)
    return f"error: {error.group(1)}" if error else f"pytest exit {code}"


def _by_simulation(tree: Path, seed: int, timeout: float, simulation: str = "quick") -> str:
    args = ["-m", "simulations", "--seed", str(seed), "--no-shrink", "--progress", "0"]
    if simulation == "shards":  # the sharded store's simulation (simulations.shards)
        args = ["-m", "simulations.shards", "--runs", str(SHARD_RUNS), "--seed", str(seed)]
    code, out = _python(tree, args, timeout)
    caught = re.search(r"^seed \d+: caught: (.+)", out, re.MULTILINE)
    if simulation == "shards" and code == 1 and caught:
        return f"sim: {caught.group(1).strip()[:200]}"
    if code is None:
        return f"timeout: quick profile over {timeout:.0f} s"
    if code == 0:
        return ""
    broke = re.search(r"AN INVARIANT BROKE:\n(.+)", out)
    if code == 1 and broke:
        return f"sim: {broke.group(1).strip()}"
    last = [line for line in out.splitlines() if line.strip()][-1:] or [""]
    return f"sim: error: {last[0].strip()[:150]}"


def _python(tree: Path, args: list[str], timeout: float) -> tuple[int | None, str]:
    """Run a killer in ``tree``: (its exit status, or None past ``timeout``; its output).

    A killer stopped by a signal it did not raise itself (another user's kill on a
    shared machine) is run once more: a signal says nothing about the mutant.
    """
    code, out = _python_once(tree, args, timeout)
    if code is not None and code < 0:
        code, out = _python_once(tree, args, timeout)
    return code, out


def _python_once(tree: Path, args: list[str], timeout: float) -> tuple[int | None, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "PYTHONDONTWRITEBYTECODE": "1",
        "MUTANT_TREE": str(tree),  # for simulations.mutant_cache's hook, if the tree has it
        "MUTANT_DEPS": str(tree.parent / f"{tree.name}.deps"),
    }
    with subprocess.Popen(
        [sys.executable, *args],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as proc:
        LIVE.add(proc)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _end_session(proc)
            return None, ""
        except BaseException:
            _end_session(proc)
            raise
        finally:
            LIVE.discard(proc)
    return proc.returncode, out


def _end_session(proc: subprocess.Popen[str]) -> None:
    """Stop a killer and every process it started: the Redis servers it starts run in
    process groups of their own, but in its session."""
    proc.terminate()  # the simulation and pytest stop their servers on SIGTERM
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=30)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == proc.pid:
                    os.kill(int(entry.name), 9)
            except (ProcessLookupError, PermissionError):
                continue
    proc.kill()
    proc.communicate()


def _copy_tree(tree: Path, root: Path | None = None) -> None:
    """The tree a mutant runs in: from the run's snapshot (``SNAPSHOT``) once it has one, so
    edits made to the worktree while a run goes on reach none of its mutants."""
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", "*.pyc")
    for name in COPIED:
        source = (root or SNAPSHOT[0]) / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=ignore)
        else:
            shutil.copy2(source, tree / name)


# ---------------------------------------------------------------- the table


def table(outcomes: Sequence[Outcome], plan: Plan, command: str, load: str) -> str:
    valid = [o for o in outcomes if o.stage != "invalid"]
    equivalent = [o for o in valid if o.equivalent]
    counted = [o for o in valid if not o.equivalent]
    killed = [o for o in counted if o.killed_by]
    by_sim = [o for o in killed if o.stage == "sim"]
    by_tests = [o for o in killed if o.stage == "tests"]
    timeouts = [o for o in killed if o.stage == "timeout"]
    simulation = f"{plan.simulation} profile" if plan.simulation == "quick" else "sharded runs"
    others = sorted({s for s in plan.simulation_of.values() if s != plan.simulation})
    if others:  # the sharded store's files
        simulation += ", " + ", ".join(others) + " where the file's target says so"
    lines = [
        f"`{command}` (stages: {', '.join(plan.stages)}; {simulation}, seed {plan.seed}; "
        f"load before: {load})",
        "",
        f"- mutants: {len(outcomes)} drawn, {len(outcomes) - len(valid)} invalid (Redis "
        f"refused the script), {len(equivalent)} equivalent, {len(counted)} counted",
        f"- killed: {len(killed)} of {len(counted)} ({_share(len(killed), len(counted))}): "
        f"{len(by_tests)} by the fast tests, {len(by_sim)} by the quick profile, "
        f"{len(timeouts)} by timeout",
        f"- survived: {len(counted) - len(killed)}",
        "",
        "| id | file:line | operator | change | killed by |",
        "| --- | --- | --- | --- | --- |",
    ]
    for o in outcomes:
        verdict = o.killed_by or (f"equivalent: {o.equivalent}" if o.equivalent else "**survived**")
        if o.stage == "invalid":
            verdict = f"invalid: {o.killed_by}"
        change = o.mutant.change.replace("|", "\\|")
        lines.append(
            f"| {o.mutant.id} | {o.mutant.where} | {o.mutant.operator} | `{change}` | "
            f"{verdict.replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def merge(tables: Sequence[Path], equivalent: dict[str, str], command: str) -> str:
    """One table from the rows of several runs' tables (a later row of a mutant replaces
    an earlier one: a rerun after new teeth), its figures counted again, and survivors
    named in ``equivalent`` marked so."""
    rows: dict[str, list[str]] = {}
    heads: list[str] = []
    for table_path in tables:
        text = table_path.read_text()
        heads.append(text.split("\n", 1)[0])
        for line in text.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if len(cells) == 5 and re.fullmatch(r"[0-9a-f]{8}", cells[0]):
                rows[cells[0]] = cells
    for cells in rows.values():
        if cells[0] not in equivalent:
            continue
        if cells[4] == "**survived**":
            cells[4] = f"equivalent: {equivalent[cells[0]]}"
        elif cells[4].startswith("timeout"):  # no change to time out of: the machine's load
            cells[4] = f"equivalent ({cells[4]}): {equivalent[cells[0]]}"
    verdicts = [cells[4] for cells in rows.values()]
    counted = [v for v in verdicts if not v.startswith(("equivalent", "invalid"))]
    killed = [v for v in counted if v != "**survived**"]
    by = {
        "tests": sum(v.startswith(("tests/", "error:", "pytest")) for v in killed),
        "sim": sum(v.startswith("sim:") for v in killed),
        "timeout": sum(v.startswith("timeout") for v in killed),
    }
    lines = [
        f"`{command}`, from the runs:",
        *(f"- {head}" for head in heads),
        "",
        f"- mutants: {len(verdicts)}, {sum(v.startswith('invalid') for v in verdicts)} invalid, "
        f"{sum(v.startswith('equivalent') for v in verdicts)} equivalent, {len(counted)} counted",
        f"- killed: {len(killed)} of {len(counted)} ({_share(len(killed), len(counted))}): "
        f"{by['tests']} by the fast tests, {by['sim']} by the quick profile, "
        f"{by['timeout']} by timeout",
        f"- survived: {len(counted) - len(killed)}",
        "",
        "| id | file:line | operator | change | killed by |",
        "| --- | --- | --- | --- | --- |",
    ]
    ordered = sorted(
        rows.values(), key=lambda c: (c[1].rsplit(":", 1)[0], int(c[1].rsplit(":", 1)[1]))
    )
    lines += ["| " + " | ".join(cells) + " |" for cells in ordered]
    return "\n".join(lines) + "\n"


def _share(a: int, b: int) -> str:
    return f"{100 * a / b:.0f}%" if b else "-"


# ---------------------------------------------------------------- the command


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # ends the run like Ctrl-C
    args = _parser().parse_args(argv)
    config = load_config(args.config)
    operators: list[str] = config["python"]["operators"]  # type: ignore[index]
    equivalent: dict[str, str] = config.get("equivalent", {})  # type: ignore[assignment]
    killers: dict[str, list[str]] = {}
    every: list[Mutant] = []
    for path, tests in targets(config, args.files):
        found = mutants_of(path, operators)
        every += found
        killers[str(path.relative_to(ROOT))] = tests
    if args.merge:
        command = "scripts/mutants " + " ".join(sys.argv[1:] if argv is None else argv)
        Path(args.out).write_text(merge(args.merge, equivalent, command))
        print(f"table written to {args.out}")
        return 0
    chosen = sample(every, args.sample, args.seed)
    if args.ids:
        chosen = [m for m in every if m.id in set(args.ids)]
    if args.list:
        for m in chosen:
            print(f"{m.id}  {m.where}  {m.operator}  {m.change}")
        print(f"{len(chosen)} of {len(every)} mutants")
        return 0
    plan = Plan(
        stages=tuple(args.stages.split(",")),
        seed=args.sim_seed,
        test_timeout=args.test_timeout,
        sim_timeout=args.sim_timeout,
        equivalent=equivalent,
        cache=args.cache,
        simulation=args.simulation or "quick",
        # --simulation names one for every mutant; without it, each file's target may.
        simulation_of={} if args.simulation else simulations_of(config),
    )
    return _run(chosen, killers, plan, args, len(every))


def _run(
    chosen: list[Mutant],
    killers: dict[str, list[str]],
    plan: Plan,
    args: argparse.Namespace,
    total: int,
) -> int:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    command = "scripts/mutants " + " ".join(sys.argv[1:] if args.argv is None else args.argv)
    print(f"{len(chosen)} of {total} mutants, {args.jobs} at a time; load {load}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="hashcrawl-mutants-", dir=_scratch()))
    try:
        _copy_tree(workdir / "snapshot", ROOT)
        SNAPSHOT[0] = workdir / "snapshot"
        invalid = lua_invalid(chosen, workdir)
        every_test = sorted({t for m in chosen for t in killers[m.path]})
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as aside:
            # The baseline's quick profile runs beside the mutants: it is judged at the end.
            base = None if args.no_baseline else aside.submit(baseline, every_test, plan, workdir)
            jobs = args.jobs if base is None else max(1, args.jobs - 1)

            def partial(done: list[Outcome]) -> None:  # a run cut short keeps its table
                Path(args.out).write_text(table(done, plan, command + " (partial)", load))

            outcomes = _pool(chosen, killers, plan, workdir, invalid, jobs, partial)
            broke = "" if base is None else base.result()
        if broke:
            print(f"the unmutated tree fails its killers: {broke}", file=sys.stderr)
            return 1
        if not args.no_baseline:
            print("baseline: the unmutated tree passes every killer", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text = table(outcomes, plan, command, load)
    Path(args.out).write_text(text)
    print(text.split("\n| id")[0])
    print(f"table written to {args.out}")
    return 0


def _pool(
    chosen: list[Mutant],
    killers: dict[str, list[str]],
    plan: Plan,
    workdir: Path,
    invalid: set[str],
    jobs: int,
    progress: Callable[[list[Outcome]], None] | None = None,
) -> list[Outcome]:
    results: dict[str, Outcome] = {
        m.id: Outcome(m, "Redis refused the script", "invalid", 0.0)
        for m in chosen
        if m.id in invalid
    }
    todo = [m for m in chosen if m.id not in invalid]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_one, m, killers[m.path], plan, workdir): m for m in todo}
        try:
            finished = list(_as_completed(futures, results, chosen, progress or _nothing))
        except BaseException:  # Ctrl-C or SIGTERM: no killer may outlive the run
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in list(LIVE):
                _end_session(proc)
            raise
    return finished


def _as_completed(
    futures: dict[concurrent.futures.Future[Outcome], Mutant],
    results: dict[str, Outcome],
    chosen: list[Mutant],
    progress: Callable[[list[Outcome]], None],
) -> Iterator[Outcome]:
    """Each mutant's outcome as it comes, printed; then all of them, in ``chosen``'s order."""
    for done, future in enumerate(concurrent.futures.as_completed(futures), start=1):
        o = future.result()
        results[o.mutant.id] = o
        verdict = o.killed_by or ("equivalent" if o.equivalent else "SURVIVED")
        print(
            f"[{done}/{len(futures)}] {o.mutant.id} {o.mutant.where} {o.mutant.change[:60]}: "
            f"{verdict[:100]} ({o.seconds:.0f} s)",
            flush=True,
        )
        progress([results[m.id] for m in chosen if m.id in results])
    yield from (results[m.id] for m in chosen)


def _nothing(_done: list[Outcome]) -> None:
    pass


def _scratch() -> str | None:
    return "/dev/shm" if Path("/dev/shm").is_dir() else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/mutants", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--files", nargs="*", default=[], help="globs of the files to mutate")
    parser.add_argument("--sample", type=int, help="run only N mutants, drawn with --seed")
    parser.add_argument("--seed", type=int, default=1, help="the sample's seed")
    parser.add_argument("--ids", nargs="*", default=[], help="run only these mutant ids")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--stages", default="tests,sim", help="tests,sim (default) or sim")
    parser.add_argument("--sim-seed", type=int, default=1, help="the quick profile's seed")
    parser.add_argument(
        "--simulation",
        choices=("quick", "shards"),
        default=None,
        help="the simulation stage for every mutant: the quick profile, or the sharded "
        "store's runs (default: the quick profile, or the one a file's target names)",
    )
    parser.add_argument("--test-timeout", type=float, default=300.0)
    parser.add_argument("--sim-timeout", type=float, default=1800.0)
    parser.add_argument("--out", default="mutants.md", help="where the table goes")
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    parser.add_argument(
        "--cache", type=Path, help="keep verdicts here; reuse those whose inputs are unchanged"
    )
    parser.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    parser.add_argument(
        "--merge", nargs="+", type=Path, help="tables of earlier runs: one table of them all"
    )
    parser.set_defaults(argv=None)
    return parser
