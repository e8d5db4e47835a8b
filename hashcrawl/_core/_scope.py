"""A crawl's scope: which hosts its links may lead to.

By default a crawl stays on the hosts of its submitted URLs, as ``wget -r`` does. It is
widened by ``--allow-domain D`` (hosts in D or under it) and opened to every host by
``--span-hosts``. The scope is fleet-wide: it lives in Redis as one set (the ``scope``
key of ``_store``) whose members are the strings :func:`members` returns, and it only
grows. Its size is therefore its version: a worker's commit carries the size of the
scope it filtered its links by, and is refused if the scope has grown since. The start
URLs' directories, which ``--no-parent`` keeps links under, are members too (``_parents``).
Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from hashcrawl._core._parents import FULL, parents_from, under
from hashcrawl._core._urls import domain_allowed

SPAN = "span"
_HOST = "host:"
_DOMAIN = "domain:"


@attrs.frozen(kw_only=True)
class Scope:
    """The hosts links may lead to; ``version`` is the size of the set it was read from."""

    hosts: frozenset[str] = frozenset()
    domains: tuple[str, ...] = ()
    span: bool = False
    version: int = 0
    #: The start URLs' directories by host (``_parents``), and whether one went
    #: unrecorded for their cap.
    parents: Mapping[str, frozenset[str]] = attrs.field(factory=dict, eq=False)
    parents_full: bool = False

    @classmethod
    def from_members(cls, stored: Iterable[str]) -> Scope:
        """The scope a stored set describes; members of no known form are ignored."""
        stored = set(stored)
        hosts = frozenset(m.removeprefix(_HOST) for m in stored if m.startswith(_HOST))
        domains = tuple(sorted(m.removeprefix(_DOMAIN) for m in stored if m.startswith(_DOMAIN)))
        return cls(
            hosts=hosts,
            domains=domains,
            span=SPAN in stored,
            version=len(stored),
            parents=parents_from(stored),
            parents_full=FULL in stored,
        )

    def widened(self, hosts: Iterable[str]) -> Scope:
        """This scope with ``hosts`` in it too, at the same version (not yet stored)."""
        return attrs.evolve(self, hosts=self.hosts | frozenset(hosts))

    def allows(self, host: str) -> bool:
        """Whether a link to ``host`` (a host key, as ``_urls.host_key`` gives) is followed."""
        if self.span or host in self.hosts:
            return True
        return bool(self.domains) and domain_allowed(host, self.domains)

    def under_parent(self, canonical_url: str, host: str) -> bool:
        """Whether a link is at or below a start URL's directory (``--no-parent``)."""
        return under(self.parents, canonical_url, host)


def members(
    *, hosts: Iterable[str] = (), domains: Iterable[str] = (), span: bool = False
) -> set[str]:
    """The set members that widen a scope to ``hosts``, ``domains`` and maybe every host."""
    found = {_HOST + h for h in hosts} | {_DOMAIN + d.strip().strip(".").lower() for d in domains}
    return found | ({SPAN} if span else set())
