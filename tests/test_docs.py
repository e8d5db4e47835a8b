"""README.md, docs/tutorial.md and docs/api.md run as written: every shell and Python block.

A reader types a page's blocks into one terminal, top to bottom. The test does the same,
in one bash session per page, in a fresh directory that holds the repository's ``docs``
and ``scripts``, with a PATH that does not lead to hashcrawl until the page says how.
A loopback site stands in for the web, and private Redis servers for the reader's.
``SUBSTITUTIONS`` lists every change made to a block, each with its reason; nothing else
is changed, so a page that drifts from the code fails.

A ```sh or ```python block runs and must succeed. A block without a language is output
and is not run. A Python block is saved to a file and run with ``python FILE`` in the
page's shell. A block that cannot run as it is has an HTML comment on the line right
before it:

    <!-- doctest: skip because REASON -->           not run; REASON is required
    <!-- doctest: background -->                   run in the background, as on another
                                                    machine; it must exit 0 by the page's end
    <!-- doctest: excerpt of docs/examples/X.py --> a Python excerpt of an example that
                                                    tests/test_examples.py runs; it must
                                                    appear in that file as it is
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs
import pytest

from hashcrawl._store._server import RedisServer
from testing import apidocs
from testing.fleet import host, href, make_site, page, request_counts
from testing.testsite import SiteServer

REPO = Path(__file__).resolve().parent.parent
PAGES = ("README.md", "docs/tutorial.md", "docs/api.md")
# What a page takes as done or read: api.md has no set-up of its own (the README's is
# done), and its Python blocks leave out `import hashcrawl` (its first line says so).
SET_UP = {"docs/api.md": "ln -s {venv} .venv && source .venv/bin/activate"}
PYTHON_PREAMBLE = {"docs/api.md": "import hashcrawl\n\n"}
TIMEOUT = 120  # seconds for one page's whole session
FLEET_PASSWORD = "PASSWORD"  # the docs' fleet Redis has this password; so has the test's

# Workers refuse private addresses by default, so the loopback site (one host, see
# bookshop()) is opened, and only it. The substitutions below put these where they go.
LOOPBACK_FLAGS = f"--allow-net {host(0)} "
LOOPBACK_KWARGS = f", allow_nets=['{host(0)}']"

SHELL = "sh"
PYTHON = "python"
OUTPUT = ""


@attrs.frozen
class Substitution:
    """Text of the docs (``doc``) and what the test runs instead (``run``), and why."""

    doc: str
    run: str
    why: str

    def apply(self, code: str, values: Mapping[str, str]) -> str:
        return self._pattern.sub(lambda _: self.run.format_map(values), code)

    def used_in(self, code: str) -> bool:
        return self._pattern.search(code) is not None

    @property
    def _pattern(self) -> re.Pattern[str]:
        # "--delay 1" must not match "--delay 10": a word ends where the docs' text ends.
        end = r"(?![\w.])" if self.doc[-1].isalnum() else ""
        return re.compile(re.escape(self.doc) + end)


TIMING = "the web gets a second between requests and 30 s of idling; loopback, much less"
LOOPBACK = "the crawl's site is on loopback (see LOOPBACK_FLAGS)"
SUBSTITUTIONS = (
    Substitution(
        "python3 -m venv .venv",
        "ln -s {venv} .venv",
        "the test's own venv stands in for a new one (a new one needs the network and 20 s)",
    ),
    Substitution(
        ".venv/bin/pip install -e .",
        ".venv/bin/pip --version",
        "hashcrawl is installed in the test's venv already",
    ),
    Substitution("https://example.com/", "{site}", "the README says: your site goes here"),
    Substitution("https://books.toscrape.com/", "{site}", "the docs' site of the web"),
    Substitution("books.toscrape.com", "{site_host}", "the same site, as a domain"),
    Substitution("10.0.0.5:6379", "{fleet_redis}", "the fleet's Redis, password PASSWORD"),
    Substitution("redis://localhost:6379/0", "{local_redis}", "a Redis on the reader's machine"),
    Substitution("--delay 1", "--delay 0.05 --idle 2", TIMING),
    Substitution("delay=1.0", "delay=0.05, idle=2" + LOOPBACK_KWARGS, TIMING),
    Substitution("hashcrawl crawl ", "hashcrawl crawl " + LOOPBACK_FLAGS, LOOPBACK),
    Substitution("hashcrawl join ", "hashcrawl join " + LOOPBACK_FLAGS, LOOPBACK),
    Substitution("hashcrawl submit ", "hashcrawl submit " + LOOPBACK_FLAGS, LOOPBACK),
    Substitution("queue.submit(", f"queue.submit(allow_nets=['{host(0)}'], urls=", LOOPBACK),
    Substitution("await trio.sleep(3600)", "await trio.sleep(2)", "an hour of crawling, cut short"),
)

# How often a page's crawls fetch each page of the site: each crawl fetches every page once.
# (api.md's later examples join or feed the crawl its first one finished: nothing new.)
CRAWLS = {"README.md": 3, "docs/tutorial.md": 3, "docs/api.md": 1}


@attrs.frozen
class Block:
    """A fenced block of a page: where it is, its language, its code and its marker."""

    page: str
    line: int
    language: str
    code: str
    marker: str | None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return (self.language != OUTPUT and self.marker is None) or self.marker == "background"


_MARKER = re.compile(r"^<!-- doctest: (.*) -->$")
_MARKERS = re.compile(r"^(skip because \S.*|background|excerpt of docs/examples/[\w/]+\.py)$")
_LANGUAGES = {"sh": SHELL, "python": PYTHON, "": OUTPUT}


def blocks_of(page: str) -> list[Block]:
    """The page's fenced blocks, in order.

    Raises:
        ValueError: a block in a language other than sh or python, or a marker that is
            unknown or not on the line right before a block.
    """
    lines = (REPO / page).read_text().splitlines()
    blocks: list[Block] = []
    markers = {n for n, line in enumerate(lines) if line.startswith("<!-- doctest")}
    n = 0
    while n < len(lines):
        if not lines[n].startswith("```"):
            n += 1
            continue
        end = lines.index("```", n + 1)
        marker = _marker_before(page, lines, n)
        markers.discard(n - 1)
        blocks.append(
            Block(page, n + 1, _language(page, n, lines[n]), _code(lines, n, end), marker)
        )
        n = end + 1
    if markers:
        raise ValueError(f"{page}:{min(markers) + 1}: a doctest marker not right before a block")
    return blocks


def _marker_before(page: str, lines: list[str], n: int) -> str | None:
    found = _MARKER.match(lines[n - 1]) if n else None
    if found is None:
        return None
    if not _MARKERS.match(found[1]):
        raise ValueError(f"{page}:{n}: unknown doctest marker {found[1]!r}")
    return found[1]


def _language(page: str, n: int, fence: str) -> str:
    name = fence.removeprefix("```")
    if name not in _LANGUAGES:
        raise ValueError(f"{page}:{n + 1}: a ```{name} block; the docs use sh, python or none")
    return _LANGUAGES[name]


def _code(lines: list[str], start: int, end: int) -> str:
    return "\n".join(lines[start + 1 : end]) + "\n"


def substituted(code: str, values: Mapping[str, str]) -> str:
    for substitution in SUBSTITUTIONS:
        code = substitution.apply(code, values)
    return code


# --- the checks that need nothing running ----------------------------------------------------


@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_run_or_marked_with_how_it_is_checked(page: str) -> None:
    """Blocks parse; each is output, runnable, or carries a known marker."""
    blocks = blocks_of(page)
    assert any(block.runs for block in blocks)
    for block in blocks:
        if block.marker and block.marker.startswith("excerpt of"):
            assert block.language == PYTHON, block.where


@pytest.mark.parametrize("page", PAGES)
def test_excerpts_appear_in_their_example_as_they_are(page: str) -> None:
    """An excerpt is in its example word for word, and tests/test_examples.py runs it."""
    run_by = (REPO / "tests" / "test_examples.py").read_text()
    for block in blocks_of(page):
        marker = block.marker or ""
        if not marker.startswith("excerpt of "):
            continue
        path = REPO / marker.removeprefix("excerpt of ")
        source = path.read_text()
        excerpt = textwrap.dedent(block.code)
        assert any(textwrap.indent(excerpt, " " * n) in source for n in (0, 4, 8)), block.where
        assert f'"{path.name}"' in run_by, f"{block.where}: no test runs {path.name}"


def test_every_substitution_is_used() -> None:
    """A substitution that no runnable block needs any more is taken out of the table."""
    code = "".join(block.code for page in PAGES for block in blocks_of(page) if block.runs)
    assert [s.doc for s in SUBSTITUTIONS if not s.used_in(code)] == []


def test_a_block_the_test_cannot_parse_fails_loudly(tmp_path: Path) -> None:
    """An unknown marker, a stray marker or an unknown language is an error naming the line."""
    cases = {
        "<!-- doctest: skip -->\n```sh\nls\n```\n": "unknown doctest marker",
        "<!-- doctest: background -->\n\n```sh\nls\n```\n": "not right before a block",
        "```console\nls\n```\n": "the docs use sh, python or none",
    }
    for text, message in cases.items():
        page = tmp_path / "page.md"
        page.write_text(text)
        with pytest.raises(ValueError, match=message):
            blocks_of(str(page))


def test_a_block_that_fails_fails_its_page_unless_marked_to_skip(tmp_path: Path) -> None:
    """A failing block ends the session non-zero, in the background too; a skipped one does not."""
    pages = {
        "```sh\necho one\nfalse\necho never\n```\n": 1,
        "<!-- doctest: skip because it fails -->\n```sh\nfalse\n```\n\n```sh\ntrue\n```\n": 0,
        "<!-- doctest: background -->\n```sh\nexit 4\n```\n\n```sh\ntrue\n```\n": 1,
    }
    for text, code in pages.items():
        (tmp_path / "page.md").write_text(text)
        workdir = tmp_path / f"reader-{len(list(tmp_path.iterdir()))}"
        workdir.mkdir()
        done = run_session(
            session_script(blocks_of(str(tmp_path / "page.md")), {}, workdir), workdir
        )
        assert (done.returncode, "never" in done.stdout) == (code, False), done.stdout


# --- running the pages ---------------------------------------------------------------------------


def bookshop() -> SiteServer:
    """A small book shop on one loopback host; every page is one link from the root."""
    a = host(0)
    pages = ["/catalogue/page-2.html", "/catalogue/dune/index.html", "/catalogue/emma/index.html"]
    resources = {(a, "/"): page("All products", *(href(a, path) for path in pages))}
    resources |= {(a, path): page(path, href(a, "/")) for path in pages}
    return SiteServer(make_site(resources))


@pytest.fixture(scope="module")
def fleet_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The fleet's Redis of the docs: it asks for the docs' password."""
    directory = tmp_path_factory.mktemp("fleet-redis")
    with RedisServer(directory=directory, password=FLEET_PASSWORD) as server:
        yield server


@pytest.fixture(scope="module")
def local_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The Redis on the reader's own machine, without a password."""
    with RedisServer(directory=tmp_path_factory.mktemp("local-redis")) as server:
        yield server


def session_script(blocks: list[Block], values: Mapping[str, str], workdir: Path) -> str:
    """One bash session that runs the page's blocks in order, as a reader would."""
    lines = ["set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"]
    (workdir / "doctest-blocks").mkdir()  # the Python blocks' files and background logs
    for name in {block.page for block in blocks} & set(SET_UP):
        lines.append(SET_UP[name].format_map(values))
    waits = []
    for block in (b for b in blocks if b.runs):
        code = substituted(block.code, values)
        lines.append(f'echo ">>> {block.where} (at $SECONDS s)" >&2')
        if block.language == PYTHON:
            script = workdir / "doctest-blocks" / f"line-{block.line}.py"
            script.write_text(PYTHON_PREAMBLE.get(block.page, "") + code)
            code = f"python {script.relative_to(workdir)}\n"
        if block.marker == "background":
            log = f"doctest-blocks/background-{block.line}.log"
            lines.append(f"( {code.strip()}\n) > {log} 2>&1 &")
            lines.append(f"background_{block.line}=$!")
            waits.append(
                f"wait $background_{block.line} || "
                f"{{ echo '{block.where} failed in the background:' >&2; cat {log} >&2; exit 1; }}"
            )
        else:
            lines.append(code.rstrip("\n"))
    return "\n".join([*lines, *waits, 'echo ">>> the end (at $SECONDS s)" >&2', ""])


def reader_environment() -> dict[str, str]:
    """This process's environment without its venv on PATH and without HASHCRAWL_REDIS."""
    venv_bin = str(Path(sys.prefix) / "bin")
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p.rstrip("/") != venv_bin]
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "HASHCRAWL_REDIS"}}
    return env | {"PATH": os.pathsep.join(path)}


def run_session(script: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen(
        ["bash", "-c", script],
        cwd=workdir,
        env=reader_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # so a timeout can end the whole session
    )
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        output += f"\n(the session was killed after {TIMEOUT} s)"
    return subprocess.CompletedProcess(process.args, process.returncode, output, "")


@attrs.frozen
class Session:
    """A page run as a reader would: its blocks, what the shell printed, what the site saw."""

    page: str
    blocks: list[Block]
    returncode: int
    output: str
    fetches: Mapping[str, int]
    site_pages: frozenset[str]

    def output_of(self, block: Block) -> str:
        """What a block printed: the session's output between its marker and the next."""
        start = self.output.index(f">>> {block.where} ")
        start = self.output.index("\n", start) + 1
        end = self.output.find("\n>>> ", start - 1)
        return self.output[start : end + 1]

    def tail(self) -> str:
        return self.output[-4000:]


# api.md's session is a python start-up per snippet (about 15 s): the slow part.
SESSIONS = [
    page if page != "docs/api.md" else pytest.param(page, marks=pytest.mark.slow) for page in PAGES
]


@pytest.fixture(scope="module", params=SESSIONS)
def session(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fleet_redis: RedisServer,
    local_redis: RedisServer,
) -> Session:
    """A page's blocks run in order in one shell, in a fresh directory."""
    page = request.param
    workdir = tmp_path_factory.mktemp("reader")
    for name in ("docs", "scripts"):
        (workdir / name).symlink_to(REPO / name)
    blocks = blocks_of(page)
    with bookshop() as server:
        values = {
            "venv": sys.prefix,
            "site": server.site.root,
            "site_host": server.site.hosts[0],
            "fleet_redis": f"127.0.0.1:{fleet_redis.port}",
            "local_redis": local_redis.url,
        }
        done = run_session(session_script(blocks, values, workdir), workdir)
        fetches = request_counts(server.requests())
    return Session(page, blocks, done.returncode, done.stdout, fetches, server.site.expected())


def test_page_runs_as_written(session: Session) -> None:
    """Every block that runs, runs in order and succeeds."""
    last = [line for line in session.output.splitlines() if line.startswith(">>> ")][-1:]
    assert session.returncode == 0, f"failed in {last}:\n{session.tail()}"


def test_each_crawl_of_a_page_fetches_the_whole_site_once(session: Session) -> None:
    """No crawl of the page ends silently with nothing done: each fetched every page."""
    expected = dict.fromkeys(session.site_pages, CRAWLS[session.page])
    assert {url: session.fetches[url] for url in expected} == expected, session.tail()


def test_sample_output_shows_the_fields_the_command_printed(session: Session) -> None:
    """An output block right after a block that ran names the same `field:` lines, in order."""
    assert session.returncode == 0, session.tail()
    compared = 0
    for before, sample in itertools.pairwise(session.blocks):
        if sample.language != OUTPUT or not before.runs or before.marker == "background":
            continue
        shown = _FIELD.findall(sample.code)
        if shown:
            assert shown == _FIELD.findall(session.output_of(before)), sample.where
            compared += 1
    if session.page == "docs/tutorial.md":
        assert compared == 1  # the status output


_FIELD = re.compile(r"^([a-z_]+): ", re.MULTILINE)


def test_api_worker_flags_table_is_the_settings_declaration() -> None:
    """docs/api.md's worker-flag rows and Settings signature are exactly what the settings
    declare (``python -m testing.apidocs`` rewrites them)."""
    text = apidocs.API.read_text()
    assert apidocs.page_rows(text) == apidocs.flag_rows()
    assert apidocs.page_signature(text) == apidocs.signature()


def test_api_exit_statuses_are_the_operations_tables() -> None:
    """The exit statuses docs/api.md lists are those of operations.md's table."""
    text = apidocs.API.read_text()
    listed = re.findall(r"^- (\d+): ", text.split("Exit status (", 1)[1].split("###", 1)[0], re.M)
    operations = (apidocs.API.parent / "operations.md").read_text()
    table = operations.split("\n## Exit status\n", 1)[1].split("\n## ", 1)[0]
    assert [int(c) for c in listed] == [int(c) for c in re.findall(r"^\| (\d+) \|", table, re.M)]
