"""Small, plausible one-line changes to the Lua scripts, for ``scripts/mutants``.

No maintained mutation tool reads Lua, and the scripts are short and line-shaped, so this
mutator works line by line on the code outside strings and comments. Each operator makes
the kind of slip a reviewer could miss:

- ``cmp``: a comparison flipped or its boundary moved (``==``/``~=``, ``<``/``<=``, ...);
- ``const``: ``== 1`` read as ``== 0`` and back;
- ``arith``: ``+``/``-`` swapped, ``*``/``/`` swapped;
- ``logic``: ``and``/``or`` swapped, a ``not`` dropped;
- ``drop``: a ``redis.call`` statement left out;
- ``ignore``: a ``redis.call`` whose reply a condition tests is taken as a success
  (the call still runs; its reply is not looked at);
- ``range``: a numeric ``for`` starting one later or ending one sooner, and an
  ``unpack`` starting one off.

Every mutant leaves the script valid Lua (``scripts/mutants`` checks that with
``SCRIPT LOAD`` before it runs any test).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import attrs

_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_CMP = {"==": "~=", "~=": "==", "<=": "<", ">=": ">", "<": "<=", ">": ">="}
_CMP_TOKEN = re.compile(r"==|~=|<=|>=|<|>")
_CONST = re.compile(r"==\s*([01])\b")
# A binary + - * /: the left side ends with a name, a number, or a closing bracket.
_ARITH = re.compile(r"(?<=[\w)\]])(\s*)([-+*/])(?=\s*[\w(#])")
_ARITH_SWAP = {"+": "-", "-": "+", "*": "/", "/": "*"}
_LOGIC = re.compile(r"\b(and|or)\b")
_NOT = re.compile(r"\bnot\s+")
_CONDITION = re.compile(r"^\s*(if|elseif|while)\b|\b(and|or)\b")
_FOR = re.compile(r"^(\s*for\s+\w+\s*=\s*)(.*?)(\s+do\b.*)$")
_UNPACK = re.compile(r"\bunpack\(([^,()]+),\s*(\d+)")


@attrs.frozen
class LuaMutant:
    """One change: in ``path`` (relative), line ``line`` (1-based) becomes ``new``."""

    path: str
    line: int
    operator: str
    old: str
    new: str

    @property
    def change(self) -> str:
        """The changed part of the line, before and after, for the table."""
        return diff(self.old, self.new)

    def apply(self, text: str) -> str:
        """``text`` (the script's source) with this mutant's line changed."""
        lines = text.split("\n")
        if lines[self.line - 1] != self.old:
            raise ValueError(f"{self.path}:{self.line} is no longer {self.old!r}")
        lines[self.line - 1] = self.new
        return "\n".join(lines)


def mutants_of(path: Path, root: Path) -> list[LuaMutant]:
    """Every mutant of the Lua script at ``path``, named relative to ``root``."""
    name = str(path.relative_to(root))
    found: list[LuaMutant] = []
    for number, line in enumerate(path.read_text().split("\n"), start=1):
        for operator, new in line_mutants(line):
            found.append(LuaMutant(name, number, operator, line, new))
    return found


def line_mutants(line: str) -> Iterator[tuple[str, str]]:
    """(operator, new line) for each mutant of one line of Lua."""
    code, comment = _split_comment(line)
    if not code.strip() or code.lstrip().startswith("#!"):
        return
    masked = _mask_strings(code)
    seen: set[str] = set()
    for operator, new_code in _code_mutants(code, masked):
        new = new_code + comment
        if new != line and new not in seen:
            seen.add(new)
            yield operator, new


def _code_mutants(code: str, masked: str) -> Iterator[tuple[str, str]]:
    for m in _CMP_TOKEN.finditer(masked):
        yield "cmp", _splice(code, m.start(), m.end(), _CMP[m.group()])
    for m in _CONST.finditer(masked):
        flipped = "0" if m.group(1) == "1" else "1"
        yield "const", _splice(code, m.start(1), m.end(1), flipped)
    for m in _ARITH.finditer(masked):
        yield "arith", _splice(code, m.start(2), m.end(2), _ARITH_SWAP[m.group(2)])
    if _CONDITION.search(masked):
        for m in _LOGIC.finditer(masked):
            yield "logic", _splice(code, m.start(), m.end(), "or" if m.group() == "and" else "and")
        for m in _NOT.finditer(masked):
            yield "logic", _splice(code, m.start(), m.end(), "")
    yield from _ignored_replies(code, masked)
    yield from _dropped_call(code, masked)
    yield from _ranges(code, masked)


def _dropped_call(code: str, masked: str) -> Iterator[tuple[str, str]]:
    stripped = masked.strip()
    if (
        stripped.startswith("redis.call(")
        and _close(masked, masked.index("(")) == len(masked.rstrip()) - 1
    ):
        indent = code[: len(code) - len(code.lstrip())]
        yield "drop", f"{indent}do end"
    # An inline statement: `if X then redis.call(...) end`.
    for m in re.finditer(r"\bthen\s+(redis\.call\()", masked):
        end = _close(masked, m.end(1) - 1)
        if masked[end + 1 :].strip().startswith("end"):
            yield "drop", _splice(code, m.start(1), end + 1, "")


def _ignored_replies(code: str, masked: str) -> Iterator[tuple[str, str]]:
    """Only in the condition of an ``if``/``elseif``/``while``: ``... then``/``do``."""
    head = re.match(r"^\s*(?:if|elseif|while)\b(.*?)\b(?:then|do)\b", masked)
    if not head:
        return
    for m in re.finditer(r"redis\.call\(", masked[: head.end(1)]):
        end = _close(masked, m.end() - 1)
        call = code[m.start() : end + 1]
        yield "ignore", _splice(code, m.start(), end + 1, f"({call} and 1 or 1)")


def _ranges(code: str, masked: str) -> Iterator[tuple[str, str]]:
    m = _FOR.match(masked)
    if m and "," in m.group(2):
        bounds = _top_level_split(code[m.start(2) : m.end(2)])
        head, tail = code[: m.start(2)], code[m.end(2) :]
        first = [f"{bounds[0].strip()} + 1", *bounds[1:]]
        yield "range", head + ", ".join(b.strip() for b in first) + tail
        last = [bounds[0], f"{bounds[1].strip()} - 1", *bounds[2:]]
        yield "range", head + ", ".join(b.strip() for b in last) + tail
    for u in _UNPACK.finditer(masked):
        start = int(u.group(2))
        for moved in (start - 1, start + 1):
            yield "range", _splice(code, u.start(2), u.end(2), str(moved))


def _split_comment(line: str) -> tuple[str, str]:
    masked = _mask_strings(line)
    at = masked.find("--")
    return (line, "") if at < 0 else (line[:at], line[at:])


def _mask_strings(code: str) -> str:
    """``code`` with every string literal's characters replaced by ``_``, same length."""
    return _STRING.sub(lambda m: m.group()[0] + "_" * (len(m.group()) - 2) + m.group()[0], code)


def _close(masked: str, opening: int) -> int:
    """The index of the bracket that closes the one at ``opening``."""
    depth = 0
    for i in range(opening, len(masked)):
        depth += {"(": 1, "{": 1, ")": -1, "}": -1}.get(masked[i], 0)
        if depth == 0:
            return i
    return len(masked) - 1


def _top_level_split(text: str) -> list[str]:
    masked, parts, depth, start = _mask_strings(text), [], 0, 0
    for i, ch in enumerate(masked):
        depth += {"(": 1, "{": 1, "[": 1, ")": -1, "}": -1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _splice(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def diff(old: str, new: str) -> str:
    """The part of the line that changed: ``old -> new``, trimmed to what differs."""
    a = 0
    while a < min(len(old), len(new)) and old[a] == new[a]:
        a += 1
    b = 0
    while b < min(len(old), len(new)) - a and old[-1 - b] == new[-1 - b]:
        b += 1
    # Widen to whole words, so "==" -> "~=" reads as itself and not "=" -> "~".
    while a > 0 and (old[a - 1].isalnum() or old[a - 1] in "=<>~"):
        a -= 1
    while b > 0 and (old[len(old) - b].isalnum() or old[len(old) - b] in "=<>~"):
        b -= 1
    was, now = old[a : len(old) - b].strip(), new[a : len(new) - b].strip()
    return f"{was or '(nothing)'} -> {now or '(nothing)'}"
