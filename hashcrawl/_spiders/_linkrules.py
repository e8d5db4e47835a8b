"""Scrapy's crawling rules: a :class:`LinkExtractor` picks a page's links, a :class:`Rule`
says what to do with them. A :class:`~hashcrawl.CrawlSpider` applies its ``rules``; a
request a rule made carries the rule's index through Redis, never the rule itself."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import attrs

from hashcrawl._exceptions import ConfigError

if TYPE_CHECKING:
    from parsel import Selector

    from hashcrawl._web._models import Response

#: Links to files no spider parses, as Scrapy's ``IGNORED_EXTENSIONS``: left out unless
#: ``deny_extensions`` says otherwise.
IGNORED_EXTENSIONS = frozenset(
    [
        # archives
        "7z",
        "7zip",
        "bz2",
        "rar",
        "tar",
        "tar.gz",
        "xz",
        "zip",
        # images
        "mng",
        "pct",
        "bmp",
        "gif",
        "jpg",
        "jpeg",
        "png",
        "pst",
        "psp",
        "tif",
        "tiff",
        "ai",
        "drw",
        "dxf",
        "eps",
        "ps",
        "svg",
        "cdr",
        "ico",
        "webp",
        # audio
        "mp3",
        "wma",
        "ogg",
        "wav",
        "ra",
        "aac",
        "mid",
        "au",
        "aiff",
        # video
        "3gp",
        "asf",
        "asx",
        "avi",
        "mov",
        "mp4",
        "mpg",
        "qt",
        "rm",
        "swf",
        "wmv",
        "m4a",
        "m4v",
        "flv",
        "webm",
        # office
        "xls",
        "xlsm",
        "xlsx",
        "xltm",
        "xltx",
        "potm",
        "potx",
        "ppt",
        "pptm",
        "pptx",
        "pps",
        "doc",
        "docb",
        "docm",
        "docx",
        "dotm",
        "dotx",
        "odt",
        "ods",
        "odg",
        "odp",
        # other
        "css",
        "pdf",
        "exe",
        "bin",
        "rss",
        "dmg",
        "iso",
        "apk",
        "jar",
        "sh",
        "rb",
        "js",
        "hta",
        "bat",
        "cpl",
        "msi",
        "msp",
        "py",
    ]
)


@attrs.frozen
class Link:
    """A link a :class:`LinkExtractor` found: the URL to request and the link's text."""

    url: str
    text: str = ""
    nofollow: bool = False


def _patterns(
    value: str | re.Pattern[str] | Iterable[str | re.Pattern[str]],
) -> tuple[re.Pattern[str], ...]:
    values = [value] if isinstance(value, str | re.Pattern) else list(value)
    try:
        return tuple(re.compile(v) for v in values)
    except re.error as exc:
        raise ConfigError(
            f"LinkExtractor: {exc.pattern!r} is not a regular expression: {exc}"
        ) from None


def _names(value: str | Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


class LinkExtractor:
    """Picks the links of a page, as Scrapy's ``LinkExtractor`` does.

    Args:
        allow: regular expressions a URL must match one of (none: every URL).
        deny: regular expressions no URL may match; deny wins over allow.
        allow_domains: hosts (and their subdomains) links may lead to (none: any).
        deny_domains: hosts (and their subdomains) links may not lead to.
        restrict_xpaths: only links inside the elements these XPaths select.
        restrict_css: only links inside the elements these CSS selectors select.
        tags: the elements that are links; attrs: their attributes that hold the URL.
        deny_extensions: file extensions left out (default: ``IGNORED_EXTENSIONS``).
        unique: each URL once (the first link to it).
        process_value: called with each attribute's value; returns the URL or None.
    """

    def __init__(
        self,
        allow: str | Iterable[str] = (),
        deny: str | Iterable[str] = (),
        allow_domains: str | Iterable[str] = (),
        deny_domains: str | Iterable[str] = (),
        restrict_xpaths: str | Iterable[str] = (),
        tags: str | Iterable[str] = ("a", "area"),
        attrs: str | Iterable[str] = ("href",),
        canonicalize: bool = False,
        unique: bool = True,
        process_value: Callable[[str], str | None] | None = None,
        deny_extensions: str | Iterable[str] | None = None,
        restrict_css: str | Iterable[str] = (),
    ) -> None:
        self.allow, self.deny = _patterns(allow), _patterns(deny)
        self.allow_domains = tuple(d.lower().strip(".") for d in _names(allow_domains))
        self.deny_domains = tuple(d.lower().strip(".") for d in _names(deny_domains))
        self.restrict_xpaths, self.restrict_css = _names(restrict_xpaths), _names(restrict_css)
        self.tags, self.attrs = _names(tags), _names(attrs)
        self.unique, self.process_value = unique, process_value
        denied = IGNORED_EXTENSIONS if deny_extensions is None else _names(deny_extensions)
        self.deny_extensions = frozenset(e.lower().lstrip(".") for e in denied)
        # canonicalize is accepted for Scrapy's sake: hashcrawl's seen filter always
        # compares canonical URLs, and a link is requested as the page wrote it.
        del canonicalize

    def extract_links(self, response: Response) -> list[Link]:
        """The links of ``response`` these rules allow (none unless it is HTML)."""
        if not response.is_html:
            return []
        found: dict[str, Link] = {}
        links: list[Link] = []
        for element in self._elements(response):
            for name in self.attrs:
                value = element.root.get(name)
                link = self._link(response, element, value) if value is not None else None
                if link is None or (self.unique and link.url in found):
                    continue
                found[link.url] = link
                links.append(link)
        return links

    def matches(self, url: str) -> bool:
        """Whether ``url`` passes allow, deny, the domains and the extensions."""
        if self.allow and not any(p.search(url) for p in self.allow):
            return False
        if any(p.search(url) for p in self.deny):
            return False
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if self.allow_domains and not any(_within(host, d) for d in self.allow_domains):
            return False
        if any(_within(host, d) for d in self.deny_domains):
            return False
        segment = parts.path.rsplit("/", 1)[-1].lower()
        return not any(segment.endswith("." + e) for e in self.deny_extensions)

    def _elements(self, response: Response) -> Iterable[Selector]:
        tags = " or ".join(f"self::{tag}" for tag in self.tags)
        query = f"descendant-or-self::*[{tags}]"
        if not (self.restrict_xpaths or self.restrict_css):
            return response.selector.xpath(query)
        regions = [*(response.xpath(x) for x in self.restrict_xpaths)]
        regions += [response.css(c) for c in self.restrict_css]
        return [e for region in regions for r in region if not isinstance(r.root, str)
                for e in r.xpath(query)]  # fmt: skip

    def _link(self, response: Response, element: Selector, value: str) -> Link | None:
        if self.process_value is not None:
            processed = self.process_value(value)
            if processed is None:
                return None
            value = processed
        url = response.urljoin(value)
        if url is None or not self.matches(url):
            return None
        text = " ".join("".join(element.xpath(".//text()").getall()).split())
        rel = str(element.root.get("rel") or "").lower().split()
        return Link(url, text, nofollow="nofollow" in rel)


def _within(host: str, domain: str) -> bool:
    return host == domain or host.endswith("." + domain)


def _method_name(value: Any) -> str | None:
    """A rule's callback (or errback...) as the name of a spider method."""
    if value is None or isinstance(value, str):
        return value
    name = getattr(value, "__name__", None)
    if callable(value) and isinstance(name, str):
        return name
    raise ConfigError(f"Rule: expected a spider method or its name, got {value!r:.80}")


def _kwargs(value: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(value or {})


@attrs.frozen
class Rule:
    """What a :class:`~hashcrawl.CrawlSpider` does with the links one extractor finds.

    Args:
        link_extractor: which links (default: every link).
        callback: the spider method (or its name) that parses the pages they lead to.
        cb_kwargs: keyword arguments for the callback (held by the rule, not the queue).
        follow: whether those pages' links are followed by the rules in turn (default:
            only when there is no callback, as in Scrapy).
        process_links: a spider method (or name) that filters the list of links.
        process_request: a spider method (or name) taking ``(request, response)`` and
            returning the request to make (or None to make none).
        errback: the spider method (or name) called when such a page fails.
    """

    link_extractor: LinkExtractor = attrs.field(factory=LinkExtractor)
    callback: str | None = attrs.field(default=None, converter=_method_name)
    cb_kwargs: dict[str, Any] = attrs.field(factory=dict, converter=_kwargs)
    follow: bool | None = None
    process_links: str | None = attrs.field(default=None, converter=_method_name)
    process_request: str | None = attrs.field(default=None, converter=_method_name)
    errback: str | None = attrs.field(default=None, converter=_method_name)

    @property
    def follows(self) -> bool:
        """Whether the pages this rule leads to have their links followed."""
        return self.callback is None if self.follow is None else self.follow
