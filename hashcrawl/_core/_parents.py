"""``--no-parent``: which links stay at or below a start URL's directory. Pure.

As wget's ``--no-parent``, a link is followed only if it is on a start URL's host and
its path is at or below that start URL's directory. The directory of a URL is its path
up to and including the last ``/``, as wget takes it (its manual, "Directory-Based
Limits": for HTTP the trailing slash is what marks a directory): ``http://h/a/b/page.html``
and ``http://h/a/b/`` have ``/a/b/``, ``http://h/a/b`` has ``/a/``. Both sides are
canonical URLs (``_urls.canonicalize``): the host in lower case and without its default
port, dot segments resolved, percent-escapes normalized (``%7e`` is ``~``; an escaped
``%2F`` stays one character of a segment, not a ``/``). The path is compared as written:
``/A/`` is not ``/a/``. The host is the host key (``_urls.host_key``), so ``http`` and
``https`` share directories. The query never counts.

Unlike wget, which leaves other hosts to ``--span-hosts``, a link to a host no start URL
is on is refused too: with ``--no-parent`` a crawl stays under its start directories.

Every start URL adds its directory, whether or not the crawl has ``--no-parent`` (a
``submit`` before the first ``join`` cannot know): each is a member ``dir:HOST/PATH/`` of
the crawl's scope set (``_scope``), so the commit's scope check covers them too, at
most :data:`MAX_PARENTS` of them (``lua/parents.lua``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hashcrawl._core._urls import canonical_parts

#: The most start directories a crawl records; past it a submit to a --no-parent crawl
#: is refused, and one to a crawl without it records :data:`FULL` instead.
MAX_PARENTS = 10_000
DIR = "dir:"
#: The scope member that says a start directory went unrecorded for the cap.
FULL = DIR + "*"


def directory_of(canonical_url: str) -> tuple[str, str]:
    """``(host key, directory)`` of a canonical URL: its path up to the last ``/``."""
    _, host = canonical_parts(canonical_url)
    path = _path(canonical_url, host)
    return host, path[: path.rfind("/") + 1]


def member_of(url: str) -> str:
    """The scope member that records ``url``'s directory (any http(s) URL).

    Raises:
        InvalidURL: not a crawlable http(s) URL.
    """
    canonical, _ = canonical_parts(url)
    host, directory = directory_of(canonical)
    return f"{DIR}{host}{directory}"


def parents_from(members: Iterable[str]) -> dict[str, frozenset[str]]:
    """The directories ``dir:`` scope members name, by host (other members ignored)."""
    found: dict[str, set[str]] = {}
    for member in members:
        if not member.startswith(DIR) or member == FULL:
            continue
        rest = member.removeprefix(DIR)
        slash = rest.find("/")
        if slash > 0:
            found.setdefault(rest[:slash], set()).add(rest[slash:])
    return {host: frozenset(dirs) for host, dirs in found.items()}


def under(parents: Mapping[str, frozenset[str]], canonical_url: str, host: str) -> bool:
    """Whether ``canonical_url`` (of host key ``host``) is at or below one of
    ``parents``' directories of its host. Looks at no more of the path than the host's
    longest directory, so a hostile link's length costs nothing past it."""
    dirs = parents.get(host)
    if not dirs:
        return False
    path = _path(canonical_url, host)
    longest = max(map(len, dirs))
    end = path.find("/")
    while 0 <= end < longest:
        if path[: end + 1] in dirs:
            return True
        end = path.find("/", end + 1)
    return False


def _path(canonical_url: str, host: str) -> str:
    """The path of a canonical URL (its query left out), given its host key."""
    start = canonical_url.index("//") + 2 + len(host)
    path = canonical_url[start:].partition("?")[0]
    return path or "/"
