"""Tests for scripts/mutants (simulations/mutants.py, simulations/lua_mutants.py): the Lua
mutator makes each kind of slip and touches no string or comment; every Lua mutant loads in
Redis; mutant ids survive lines moving; Python annotations are left alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis as redis_py

from simulations import lua_mutants, mutants


def changes(line: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for operator, new in lua_mutants.line_mutants(line):
        found.setdefault(operator, []).append(new)
    return found


def test_a_guard_on_a_reply_gets_every_kind_of_slip() -> None:
    """A comparison, its constant, the call's reply ignored, and the call dropped."""
    got = changes("  if redis.call('XDEL', b.src, id) == 1 then")
    assert "  if redis.call('XDEL', b.src, id) ~= 1 then" in got["cmp"]
    assert got["const"] == ["  if redis.call('XDEL', b.src, id) == 0 then"]
    assert got["ignore"] == ["  if (redis.call('XDEL', b.src, id) and 1 or 1) == 1 then"]


def test_a_statement_call_is_dropped_and_a_loop_range_moved() -> None:
    """A bare redis.call goes; a numeric for starts one later or ends one sooner."""
    assert changes("  redis.call('SREM', P .. 'parked', host)")["drop"] == ["  do end"]
    assert changes("for i = 1, #popped, 2 do")["range"] == [
        "for i = 1 + 1, #popped, 2 do",
        "for i = 1, #popped - 1, 2 do",
    ]


def test_strings_and_comments_are_never_mutated() -> None:
    """An operator inside a string or after -- is text, not code."""
    assert changes("local x = 'a == b' -- if a < b then") == {}
    assert changes("-- total = total + 1") == {}


def test_every_lua_mutant_of_the_scripts_loads_in_redis(redis_url: str) -> None:
    """The mutator keeps the scripts valid Lua: no mutant is refused by SCRIPT LOAD."""
    client = redis_py.Redis.from_url(redis_url)
    lua = Path(mutants.ROOT, "hashcrawl", "_store", "lua")
    refused = []
    try:
        for path in sorted(lua.glob("*.lua")):
            text = path.read_text()
            for m in lua_mutants.mutants_of(path, mutants.ROOT):
                try:
                    client.script_load(m.apply(text))
                except redis_py.ResponseError as exc:
                    refused.append(f"{m.path}:{m.line} {m.change}: {exc}")
    finally:
        client.close()
    assert refused == []


def test_a_mutant_id_stays_when_lines_above_it_move(tmp_path: Path) -> None:
    """Ids hash the line's text and the change, not its number."""
    script = tmp_path / "s.lua"
    script.write_text("local a = 1\nif a == 1 then return 0 end\n")
    before = {
        mutants.mutant_id(m.path, m.old, m.new) for m in lua_mutants.mutants_of(script, tmp_path)
    }
    script.write_text("-- a new first line\nlocal a = 1\nif a == 1 then return 0 end\n")
    after = {
        mutants.mutant_id(m.path, m.old, m.new) for m in lua_mutants.mutants_of(script, tmp_path)
    }
    assert before == after and before


def test_the_same_change_to_two_lines_of_the_same_text_gets_two_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first keeps the plain id (as earlier tables have it); the second gets its own."""
    monkeypatch.setattr(mutants, "ROOT", tmp_path)
    script = tmp_path / "s.lua"
    script.write_text("if a == 1 then return 0 end\nlocal b = 2\nif a == 1 then return 0 end\n")
    lua = lua_mutants.mutants_of(script, tmp_path)
    plain = [mutants.mutant_id(m.path, m.old, m.new) for m in lua]
    assert len(set(plain)) < len(plain)  # lines 1 and 3 collide by their text
    ids = [m.id for m in mutants.mutants_of(script, [])]
    assert len(set(ids)) == len(ids)
    first = [n for n, m in enumerate(lua) if m.line == 1]
    assert [ids[n] for n in first] == [plain[n] for n in first]


def test_python_annotations_are_not_mutated(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``int | None`` in an annotation is a string nobody evaluates: no mutant there."""
    pytest.importorskip("cosmic_ray", reason="pip install -e '.[mutants]'")
    monkeypatch.setattr(mutants, "ROOT", tmp_path)
    module = tmp_path / "m.py"
    module.write_text(
        "from __future__ import annotations\n"
        "def f(x: int | None, y: int) -> int | None:\n"
        "    z = x | y\n"
        "    return z\n"
    )
    found = mutants.python_mutants(module, ["ReplaceBinaryOperator_BitOr_BitAnd"])
    assert [(m.line, m.change) for m in found] == [(3, "| -> &")]


def test_a_cached_verdict_is_reused_only_while_every_file_it_read_is_unchanged(
    tmp_path: Path,
) -> None:
    """The files recorded (the mutant's own, with the mutant applied, among them) and the
    environment must all match; a change to any of them makes the mutant run again."""
    from simulations import mutant_cache

    root, tree, cache = tmp_path / "root", tmp_path / "tree", tmp_path / "cache"
    for place in (root, tree):
        (place / "pkg").mkdir(parents=True)
        (place / "pkg" / "a.py").write_text("x = 1\n")
        (place / "pkg" / "s.lua").write_text("return 1\n")
    (tree / "pkg" / "a.py").write_text("x = 2\n")  # the mutant
    deps = mutant_cache.arm(tree)
    deps.write_text("pkg/a.py\n")  # as the hook writes it
    read = mutant_cache.read_set(tree, deps, root)
    assert read is not None and set(read) == {"pkg/a.py", "pkg/s.lua"}
    verdict = {"killed_by": "tests/test_a.py::test_x", "stage": "tests"}
    mutant_cache.store(cache, "abcd1234", "env", read, verdict)
    mutated = ("pkg/a.py", "x = 2\n")
    assert mutant_cache.lookup(cache, "abcd1234", "env", root, mutated) == verdict
    assert mutant_cache.lookup(cache, "abcd1234", "other env", root, mutated) is None
    assert mutant_cache.lookup(cache, "abcd1234", "env", root, ("pkg/a.py", "x = 3\n")) is None
    (root / "pkg" / "s.lua").write_text("return 2\n")
    assert mutant_cache.lookup(cache, "abcd1234", "env", root, mutated) is None


def test_the_sharded_stores_files_meet_the_sharded_simulation_and_the_rest_the_quick_one() -> None:
    """The quick profile never runs the sharded store's code: a mutant there is judged by
    the sharded runs, which its target in mutants.toml names; --simulation overrides all."""
    chosen = mutants.simulations_of(mutants.load_config())
    assert chosen["hashcrawl/_run/_sharding.py"] == "shards"
    assert chosen["hashcrawl/_core/_shards.py"] == "shards"
    assert "hashcrawl/_core/_session.py" not in chosen
    plan = mutants.Plan(
        stages=("sim",), seed=1, test_timeout=1, sim_timeout=1, equivalent={},
        simulation_of=chosen,
    )  # fmt: skip
    assert plan.for_file("hashcrawl/_run/_sharding.py").simulation == "shards"
    assert plan.for_file("hashcrawl/_core/_session.py") is plan
