"""A worker's settings, declared once: the fields, their checks, and their CLI flags.

Each field of :class:`Settings` carries a :class:`Flag` in its metadata (``_flags``:
the declaration, its parsers and checks). From that one
declaration come the ``join`` and ``crawl`` flags, the settings a command line gives,
and the command line that gives a child worker the same settings
(``_cli._flagset``: the argparse bridge).

A field whose flag says ``crawl`` is a crawl setting: the whole fleet must use one value
of it, so it is stored with the crawl in Redis (``_crawlconfig``), not taken from each
worker's command line. :data:`CRAWL` lists them, from the declaration.
"""

from __future__ import annotations

from typing import Any

import attrs

from hashcrawl._exceptions import ConfigError
from hashcrawl._version import DEFAULT_USER_AGENT

from ._due import DEFAULT_PAGES
from ._flags import (
    HEADERS_ENV_VAR,
    PROXIES_ENV_VAR,
    Flag,
    _cookie_bytes,
    _header_line,
    _header_lines,
    _networks,
    _not_negative,
    _number,
    _or_none,
    _port,
    _positive,
    _proxy_urls,
    _setting,
    _statuses,
    _text,
    _url_pattern,
    _user_agent,
    _whole,
)
from ._revisit import DEFAULT_MAX_S, DEFAULT_MIN_S, Policy
from ._steps import host_patterns
from ._turns import shared_hosts

#: The default --warc-max-size: a new WARC file before one would pass 1 GB (StormCrawler's).
WARC_MAX_SIZE = 1_000_000_000


def revisit_policy(settings: Settings) -> Policy | None:
    """The crawl's revisit policy; None without --revisit.

    Raises:
        ConfigError: --revisit, --revisit-min or --revisit-max out of range (one line).
    """
    text = "adaptive" if settings.revisit is None else settings.revisit
    try:
        policy = Policy.parse(text, low=settings.revisit_min, high=settings.revisit_max)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return None if settings.revisit is None else policy


@attrs.frozen(kw_only=True)
class Settings:
    """How one worker crawls.

    Every field is also a flag of ``hashcrawl join`` and ``hashcrawl crawl``; its help
    text is the field's documentation (``hashcrawl join --help``). The crawl settings
    (:data:`CRAWL`) are the crawl's, stored in Redis: a worker takes them from there.
    """

    delay: float = _setting(1.0, "least seconds between two requests to one host, fleet-wide",
        check=_not_negative, metavar="S", crawl=True)  # fmt: skip
    per_host: int = _setting(
        1,
        "most requests in flight to one host",
        check=_positive,
        parse=_whole,
        metavar="N",
        crawl=True,
        fixed=True,
    )
    concurrency: int = _setting(16, "most requests in flight from this worker",
        check=_positive, parse=_whole, metavar="N")  # fmt: skip
    idle: float | None = _setting(
        30.0,
        "end once the whole crawl has been idle this many seconds (it idles only once a "
        "URL was submitted); 'none' never ends",
        check=_not_negative,
        parse=_or_none(_number),
        metavar="S",
    )
    lease: float = _setting(
        60.0,
        "seconds of silence after which a worker is taken for dead",
        check=_positive,
        metavar="S",
        crawl=True,
        fixed=True,
    )
    grace: float = _setting(30.0, "seconds a stopping worker gives requests in flight",
        check=_not_negative, metavar="S")  # fmt: skip
    user_agent: str = _setting(
        DEFAULT_USER_AGENT,
        "the User-Agent header, and the agent robots.txt is matched for",
        check=_user_agent,
        parse=_text,
        metavar="UA",
        crawl=True,
        fixed=True,
    )
    allow_domains: tuple[str, ...] = _setting(
        (),
        "also follow links to hosts in this domain (repeatable); the crawl's scope, "
        "fleet-wide, is the submitted URLs' hosts",
        converter=tuple,
        parse=_text,
        name="--allow-domain",
        repeat=True,
        metavar="D",
        crawl=True,
    )
    span_hosts: bool = _setting(
        False,
        "follow links to every host, not only the submitted URLs' hosts (fleet-wide)",
        parse=None,
        crawl=True,
    )
    sitemaps: bool = _setting(
        False,
        "also crawl the URLs of each host's sitemaps (robots.txt Sitemap: lines and "
        "/sitemap.xml, indexes and gzip included)",
        parse=None,
        crawl=True,
    )
    max_depth: int | None = _setting(
        None,
        "do not follow links more than this many hops from a submitted URL",
        check=_not_negative,
        parse=_or_none(_whole),
        metavar="N",
        crawl=True,
    )
    accept_regex: str | None = _url_pattern("follow only links whose canonical URL this "
        "RE2 pattern matches (searched, as wget's: anchor with ^ or $), fleet-wide")  # fmt: skip
    reject_regex: str | None = _url_pattern("follow no link whose canonical URL this RE2 "
        "pattern matches, fleet-wide")  # fmt: skip
    no_parent: bool = _setting(False, "follow only links at or below a start URL's directory "
        "(wget's: http://h/a/b/ and http://h/a/b/page.html keep to /a/b/, http://h/a/b to "
        "/a/), on its host, fleet-wide", parse=None, crawl=True)  # fmt: skip
    headers: tuple[str, ...] = attrs.field(default=(), converter=_header_lines, repr=False,
        metadata={"flag": Flag(help="send this header with every request, 'Name: value' "
            "(repeatable); unlike a Request's headers it never goes to Redis: the place for "
            f"credentials (${HEADERS_ENV_VAR}, a JSON list of lines, keeps them out of ps)",
            parse=_header_line, name="--header", repeat=True, metavar="'NAME: VALUE'",
            secret=True)})  # fmt: skip
    proxies: tuple[str, ...] = attrs.field(default=(), converter=_proxy_urls, repr=False,
        metadata={"flag": Flag(help="send every request through this forward proxy, http://"
            "[USER:PASSWORD@]HOST:PORT (repeatable: a pool; each host keeps one of it); never "
            f"goes to Redis (${PROXIES_ENV_VAR}, a JSON list, keeps it out of ps)",
            parse=_text, name="--proxy", repeat=True, metavar="URL", secret=True)})  # fmt: skip
    proxy_retry_status: tuple[int, ...] = _setting((), "move a host to the pool's next proxy "
        "(and retry the page) on this status, as on a connection error or 407 (repeatable)",
        check=_statuses, converter=tuple, parse=_whole, repeat=True, metavar="CODE")  # fmt: skip
    allow_request_proxy: bool = _setting(False, "send a request naming its own proxy (Request("
        "proxy=...), meta['proxy']) through it: the queue's writers pick", parse=None)  # fmt: skip
    max_attempts: int = _setting(
        4,
        "tries before a page is dead-lettered",
        check=_positive,
        parse=_whole,
        metavar="N",
        crawl=True,
    )
    timeout: float = _setting(
        30.0,
        "seconds for one whole fetch, connecting and the body included",
        check=_positive,
        metavar="S",
    )
    parse_timeout: float = _setting(
        60.0,
        "seconds a parse callback may run on one page before it is cancelled and the "
        "page fails (retried, then dead-lettered)",
        check=_positive,
        metavar="S",
    )
    max_body: int = _setting(
        10 * 1024 * 1024,
        "most bytes of a body the default fetcher keeps, counted after decoding; "
        "the rest is not read",
        check=_positive,
        parse=_whole,
        metavar="BYTES",
    )
    allow_nets: tuple[str, ...] = _setting(
        (),
        "also fetch from this non-public network, e.g. 10.0.0.0/8 or 127.0.0.2 (repeatable)",
        check=_networks,
        converter=tuple,
        parse=_text,
        name="--allow-net",
        repeat=True,
        metavar="CIDR",
    )
    allow_private: bool = _setting(
        False,
        "fetch from any address: loopback, private and link-local included",
        parse=None,
    )
    max_buffer: int = _setting(
        50_000,
        "entries one worker holds in memory; the rest wait in Redis",
        check=_positive,
        parse=_whole,
        metavar="N",
    )
    obey_robots: bool = _setting(
        True,
        "do not fetch or obey robots.txt",
        parse=None,
        name="--ignore-robots",
        negate=True,
        crawl=True,
    )
    cookies: bool = _setting(
        True,
        "keep no cookies: by default each host's cookies are kept by its owner and "
        "handed over with the host",
        parse=None,
        name="--no-cookies",
        negate=True,
        crawl=True,
    )
    max_cookie_bytes: int = _setting(4096, "most bytes of cookies a host's jar keeps (the "
        "largest go first); its owner keeps at most 10,000 jars, and hands a jar over in "
        "Redis", check=_cookie_bytes, parse=_whole, metavar="N")  # fmt: skip
    fsync: bool = _setting(
        True,
        "do not fsync the output before acknowledging pages: faster, but a power loss "
        "may lose items of acknowledged pages",
        parse=None,
        name="--no-fsync",
        negate=True,
    )
    warc_max_size: int = _setting(
        WARC_MAX_SIZE,
        "with -o NAME.warc.gz (or .warc): start a new WARC file before one would pass "
        "this many bytes",
        check=_positive,
        parse=_whole,
        metavar="BYTES",
    )
    warc_revisits: bool = _setting(
        False,
        "with -o NAME.warc.gz (or .warc): write a response whose payload this worker has "
        "archived already as a revisit record (identical payload digest), headers only",
        parse=None,
    )
    max_links: int = _setting(
        5000,
        "most links followed from one page; the rest are dropped and counted",
        check=_positive,
        parse=_whole,
        metavar="N",
    )
    max_pages_per_host: int | None = _setting(
        None,
        "most page requests one host gets in the whole crawl (its owner counts them)",
        check=_positive,
        parse=_or_none(_whole),
        metavar="N",
        crawl=True,
    )
    shards: int | None = _setting(
        None, "spread a new crawl over N Redis Cluster hash slots (fixed at its start); "
        "default: the crawl's, or for a new crawl one a primary (1 off a cluster)",
        check=_positive, parse=_or_none(_whole), metavar="N",
    )  # fmt: skip
    max_pages: int | None = _setting(None, "stop this worker (not the crawl) after so many "
        "pages fetched", check=_positive, parse=_or_none(_whole), metavar="N")  # fmt: skip
    max_pages_total: int | None = _setting(
        None, "stop the crawl: the fleet fetches at most N pages in all (counted in Redis; "
        "pages in flight when it is reached finish)", check=_positive,
        parse=_or_none(_whole), metavar="N", crawl=True,
    )  # fmt: skip
    max_items: int | None = _setting(
        None, "stop this worker (not the crawl) after so many items written",
        check=_positive, parse=_or_none(_whole), metavar="N",
    )  # fmt: skip
    max_errors: int | None = _setting(
        None, "stop this worker (not the crawl) after so many failed fetches",
        check=_positive, parse=_or_none(_whole), metavar="N",
    )  # fmt: skip
    max_time: float | None = _setting(
        None, "stop this worker (not the crawl) after so many seconds",
        check=_positive, parse=_or_none(_number), metavar="S",
    )  # fmt: skip
    max_memory: float | None = _setting(
        None, "stop this worker (not the crawl) after so many MiB of resident memory",
        check=_positive, parse=_or_none(_number), metavar="MIB",
    )  # fmt: skip

    revisit: str | None = _setting(
        None, "fetch each page again S seconds after each fetch; 'adaptive': sooner once "
        "it changed, later while not (see --revisit-min/--revisit-max)",
        parse=_or_none(_text), metavar="S", crawl=True, fixed=True,
    )  # fmt: skip
    revisit_min: int = _setting(DEFAULT_MIN_S, "--revisit adaptive's shortest interval, "
        "seconds", parse=_whole, metavar="S", crawl=True, fixed=True)  # fmt: skip
    revisit_max: int = _setting(DEFAULT_MAX_S, "--revisit adaptive's longest interval, seconds",
        check=lambda settings, _, __: revisit_policy(settings),
        parse=_whole, metavar="S", crawl=True, fixed=True)  # fmt: skip
    revisit_pages: int = _setting(DEFAULT_PAGES, "the revisited pages to size the records' "
        "buckets for (about 64 a bucket, so they stay packed)", check=_positive,
        parse=_whole, metavar="N", crawl=True, fixed=True)  # fmt: skip

    metrics_port: int | None = _setting(None, "serve Prometheus metrics at "
        "http://ADDR:PORT/metrics ('crawl': PORT, PORT+1, ...)", check=_port,
        parse=_or_none(_whole), metavar="PORT")  # fmt: skip
    metrics_addr: str = _setting("127.0.0.1", "the address --metrics-port listens on",
        parse=_text, metavar="ADDR")  # fmt: skip
    render: bool = _setting(False, "render every page of the crawl in its workers' browsers "
        "(a request may also ask with render=True)", parse=None, crawl=True)  # fmt: skip
    render_hosts: str | None = _setting(None, "render every page of the hosts these "
        "comma-separated patterns match, e.g. '*.shop.test,app.test'", crawl=True,
        check=lambda _, __, value: host_patterns(value), parse=_or_none(_text),
        metavar="PATTERN")  # fmt: skip
    render_fetch_hosts: str | None = _setting(None, "the hosts a rendered page may fetch "
        "from beside its own, comma-separated, e.g. 'cdn.test,static.test:8080' (at most "
        "100); every request to them, by any worker, then takes its turn in Redis",
        crawl=True, fixed=True, check=lambda _, __, value: shared_hosts(value),
        parse=_or_none(_text), metavar="HOSTS")  # fmt: skip
    render_fetch_margin: float = _setting(0.25, "seconds after its turn within which a "
        "request to a --render-fetch-hosts host must leave (else it asks again): each turn "
        "of such a host is --delay plus this apart", check=_positive, metavar="S")  # fmt: skip
    chromium: str | None = _setting(None, "the Chromium to render with (default: chromium "
        "on PATH)", parse=_or_none(_text), metavar="PATH")  # fmt: skip
    browser_tabs: int = _setting(4, "most pages rendered at once (tabs of the browser)",
        check=_positive, parse=_whole, metavar="N")  # fmt: skip
    render_timeout: float = _setting(30.0, "seconds one rendered page may take, steps included; "
        "past it its tab is closed and the fetch fails", check=_positive, metavar="S")  # fmt: skip
    browser_max_mib: float | None = _setting(2048.0, "restart the browser (once the pages in it "
        "end) when its processes' memory (PSS) passes so many MiB; 'none': never",
        check=_positive, parse=_or_none(_number), metavar="MIB")  # fmt: skip
    browser_upload_dir: str | None = _setting(None, "the directory a set_input_files step "
        "uploads from (paths inside it only; unset, a request that uploads is dead-lettered)",
        parse=_or_none(_text), metavar="DIR")  # fmt: skip

    def __attrs_post_init__(self) -> None:
        if self.delay * 2 > self.lease:
            # A dead owner's last request may be up to a quarter lease after its last
            # heartbeat, and its hosts move a full lease after it: a delay must fit between.
            raise ConfigError(
                f"--delay must be at most half of --lease, got {self.delay} and {self.lease}"
            )

    @classmethod
    def of(cls, given: dict[str, Any]) -> Settings:
        """Settings from keyword arguments, naming an unknown one.

        Raises:
            ConfigError: an unknown setting or a value out of range.
        """
        known = {field.name for field in attrs.fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ConfigError(
                f"unknown setting {unknown[0]!r}; settings are {', '.join(sorted(known))}"
            )
        return cls(**given)

    @property
    def beat_interval(self) -> float:
        """Seconds between heartbeats: often enough to notice joins and fence quickly."""
        return min(1.0, self.lease / 10)

    @property
    def fresh_for(self) -> float:
        """Seconds after a heartbeat was sent during which this worker may still fetch."""
        return self.lease / 4

    @property
    def answer_timeout(self) -> float:
        """Longest wait for any one answer from Redis, reconnecting included."""
        return self.lease / 3


SCOPE = ("allow_domains", "span_hosts")  # the settings ``submit`` takes too
ADDRESSES = ("allow_nets", "allow_private")  # and these, to check start URLs


#: The crawl settings: one value fleet-wide, stored with the crawl (see ``_crawlconfig``).
CRAWL = tuple(f.name for f in attrs.fields(Settings) if f.metadata["flag"].crawl)


@attrs.define
class Current:
    """The settings a membership decides by now: one holder that its parts read, so
    that a change of the crawl's settings (``configure``) reaches them all at once."""

    settings: Settings
