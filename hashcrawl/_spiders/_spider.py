"""Spiders: a class bundling start requests and the callbacks, errbacks and rules that
requests name; and :class:`Calls`, what the worker's handler calls on one."""

from __future__ import annotations

import builtins
import contextlib
import functools
import importlib
import importlib.util
import inspect
import json
import logging
import sys
import traceback
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from pathlib import Path
from typing import Any, ClassVar

import attrs
import trio

from hashcrawl._core._entry import MAX_CB_KWARGS, Entry
from hashcrawl._core._settings import Settings
from hashcrawl._exceptions import ConfigError, DropItem
from hashcrawl._spiders._linkrules import Rule
from hashcrawl._web._models import Request, Response

log = logging.getLogger("hashcrawl")

MAX_LINK_TEXT = 1024  # characters of a link's text a CrawlSpider's request carries in meta


class Spider:
    """Subclass to crawl with your own callbacks, the way a Scrapy spider is written.

    ``start()`` (an async generator, as in Scrapy 2.13) or ``start_requests()`` gives
    the first requests (by default one per ``start_urls``); every worker asks for them
    when it starts, and requests seen before are left out.
    ``parse`` handles every response whose request names no callback; a request may
    name another method of the subclass with ``Request(url, callback="parse_item")``,
    and an ``errback`` for when it fails. Only methods the subclass defines itself can
    be named: an entry in Redis can never call a dunder or one of hashcrawl's methods.

    Only 2xx responses reach a callback, and redirects are followed, never passed to
    one; statuses in ``handle_httpstatus_list`` (the spider's, or the request's) reach
    it too. Any other status, and a fetch that failed for good, go to the request's
    errback (see :class:`Failure`).

    ``custom_settings`` maps Scrapy's setting names (or hashcrawl's) to values; a flag
    or a ``Worker`` argument given wins over them, and a crawl setting is the crawl's
    (see ``scrapy_settings``). ``ITEM_PIPELINES`` there lists item pipelines.
    ``closed(reason)`` is called when the worker stops: ``"finished"`` when the crawl
    ended, ``"shutdown"`` when the worker was stopped, else the error's name.

    ``blocking = True`` says the spider's callbacks block (a synchronous database call,
    heavy computation): each is then run in a thread (``trio.to_thread``) so the worker
    keeps fetching, heartbeating and honouring ``--parse-timeout`` meanwhile. Leave it
    False for callbacks that only read the response: a thread per page costs more than
    such a callback.
    """

    start_urls: ClassVar[Sequence[str]] = ()
    blocking: ClassVar[bool] = False
    custom_settings: ClassVar[Mapping[str, Any] | None] = None
    handle_httpstatus_list: ClassVar[Sequence[int]] = ()

    async def start(self) -> AsyncGenerator[Request | str, None]:
        """The first requests, as Scrapy 2.13's ``start()``: an async generator; by
        default what ``start_requests()`` gives."""
        for request in self.start_requests() or ():
            yield request

    def start_requests(self) -> Iterable[Request | str]:
        """The first requests: by default a GET of each of ``start_urls``."""
        return list(self.start_urls)

    def parse(self, response: Response) -> Any:
        """Default: one item per page, and follow every link."""
        yield {"url": response.request.url, "status": response.status, "title": response.title()}
        yield from response.links()

    def closed(self, reason: str) -> None:
        """Called once when this worker stops; ``reason`` says why."""

    def log(self, message: Any, level: int = logging.DEBUG, **kw: Any) -> None:
        """Log ``message`` with the spider's logger, as Scrapy's (deprecated) ``log()``."""
        self.logger.log(level, message, **kw)

    @property
    def logger(self) -> logging.Logger:
        """A logger named after the spider, as Scrapy's ``self.logger``."""
        return logging.getLogger(spider_name(self))


class CrawlSpider(Spider):
    """Scrapy's ``CrawlSpider``: ``rules`` say which links to follow and which callback
    parses the pages they lead to. Start pages go through ``parse_start_url`` and every
    rule; do not override ``parse``. A request a rule made carries the rule's index, so
    every worker must run the same rules in the same order.
    """

    rules: ClassVar[Sequence[Rule]] = ()

    def parse(self, response: Response) -> Any:
        return self._parse_response(response, self.parse_start_url, {}, follow=True)

    def parse_start_url(self, response: Response) -> Any:
        """What a start page gives besides the links the rules follow: nothing here."""
        return ()

    def process_results(self, response: Response, results: Any) -> Any:
        """Each rule callback's output passes through here, as in Scrapy."""
        return results

    def _rule_response(self, index: int, response: Response, **cb_kwargs: Any) -> Any:
        rule = self.rules[index]
        callback = getattr(self, rule.callback) if rule.callback else None
        return self._parse_response(
            response, callback, {**rule.cb_kwargs, **cb_kwargs}, rule.follows
        )

    def _parse_response(
        self,
        response: Response,
        callback: Callable[..., Any] | None,
        cb_kwargs: dict[str, Any],
        follow: bool,
    ) -> Iterator[Any]:
        if callback is not None:
            results = self.process_results(response, callback(response, **cb_kwargs))
            if isinstance(results, dict) or attrs.has(type(results)):
                results = [results]
            yield from results or ()
        if follow:
            yield from self._requests_to_follow(response)

    def _requests_to_follow(self, response: Response) -> Iterator[Request]:
        seen: set[str] = set()
        for index, rule in enumerate(self.rules):
            links = [link for link in rule.link_extractor.extract_links(response)
                     if link.url not in seen]  # fmt: skip
            if rule.process_links:
                links = list(getattr(self, rule.process_links)(links))
            for link in links:
                seen.add(link.url)
                # As Scrapy's rules put it there; cut, since a page's anchor text is
                # the page's to make as long as it likes and the entry holds 64 KiB.
                meta = {"link_text": link.text[:MAX_LINK_TEXT]}
                request: Request | None = Request(
                    link.url, rule=index, errback=rule.errback, meta=meta
                )
                if rule.process_request:
                    request = getattr(self, rule.process_request)(request, response)
                if request is not None:
                    yield request


def _listed(start_requests: Callable[[], Iterable[Request | str] | None]) -> list[Any]:
    return list(start_requests() or ())


def _own_methods(cls: type) -> set[str]:
    """Public methods defined by ``cls`` and its bases, hashcrawl's own classes left out."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__ == __name__ or klass is object:
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") and inspect.isfunction(value) and not hasattr(Spider, name):
                names.add(name)
    return names


def spider_name(spider: Spider) -> str:
    """The spider's ``name`` if it has one, else its class's."""
    return str(getattr(spider, "name", "") or type(spider).__qualname__)


class Failure:
    """What an errback is called with, as Twisted's ``Failure`` in Scrapy: ``value`` is
    the exception (an :class:`~hashcrawl.HttpError` holding the ``response`` for a status
    the callback does not take, else the fetch's error), ``request`` the request."""

    def __init__(self, value: BaseException, request: Request) -> None:
        self.value = value
        self.request = request

    @property
    def type(self) -> type[BaseException]:
        return type(self.value)

    def check(self, *kinds: builtins.type[BaseException]) -> builtins.type[BaseException] | None:
        """The first of ``kinds`` the exception is an instance of, or None."""
        return next((kind for kind in kinds if isinstance(self.value, kind)), None)

    def getErrorMessage(self) -> str:  # Twisted's name, which ports call
        return str(self.value)

    def __repr__(self) -> str:
        return f"<Failure {type(self.value).__name__}: {self.value}>"


class Calls:
    """What a handler calls on a spider: callbacks and errbacks by name, rules by index,
    item pipelines; and the statuses its callbacks take beyond 2xx (``statuses``, which
    the response policy reads: ``_core._respond.takes``).

    Raises:
        ConfigError: a rule names a method the spider lacks, or a pipeline is unusable.
    """

    def __init__(self, spider: Spider) -> None:
        self.spider = spider
        self.name = spider_name(spider)
        self.blocking = bool(spider.blocking)
        self.methods = _own_methods(type(spider)) | {"parse"}
        self.rules: tuple[Rule, ...] = (
            tuple(spider.rules) if isinstance(spider, CrawlSpider) else ()
        )
        for index, rule in enumerate(self.rules):
            for kind in ("callback", "errback", "process_links", "process_request"):
                name = getattr(rule, kind)
                if name is not None and name not in self.methods:
                    raise ConfigError(
                        f"{self.name}.rules[{index}]: {kind} {name!r} is not a method of the spider"
                    )
        self.statuses = frozenset(spider.handle_httpstatus_list)
        self.pipelines = pipelines_of(spider)

    def unknown(self, wanted: Request | Entry) -> str | None:
        """What a request or entry names that the spider lacks, said as "no ... 'x'"."""
        for kind, name in (("callback", wanted.callback), ("errback", wanted.errback)):
            if name is not None and name not in self.methods:
                return f"no {kind} {name!r:.80}"
        if wanted.rule is not None and wanted.rule >= len(self.rules):
            return f"no rule {wanted.rule} (it has {len(self.rules)})"
        return None

    def refusal(self, entry: Entry) -> str | None:
        """Why the spider cannot handle ``entry`` (read from Redis), or None."""
        unknown = self.unknown(entry)
        if unknown is not None:
            return f"spider {self.name} has {unknown}"
        kwargs = entry.cb_kwargs
        if kwargs is not None and not (
            isinstance(kwargs, dict)
            and len(json.dumps(kwargs, separators=(",", ":")).encode("utf-8")) <= MAX_CB_KWARGS
        ):
            shown = json.dumps(kwargs)[:80]
            return f"cb_kwargs are not a JSON object of at most {MAX_CB_KWARGS} bytes: {shown}"
        return None

    def step_method(self, name: str) -> Callable[[Any], Any] | None:
        """The method a call step names, if it is one of the spider's own classes'."""
        return getattr(self.spider, name) if name in self.methods and name != "parse" else None

    def callback(self, entry: Entry) -> Callable[[Response], Any]:
        """The callback for ``entry``'s response, its cb_kwargs bound."""
        kwargs = dict(entry.cb_kwargs or {})
        if entry.callback:
            method = getattr(self.spider, entry.callback)
        elif entry.rule is not None:
            assert isinstance(self.spider, CrawlSpider)  # refusal() saw the rule index
            method = functools.partial(self.spider._rule_response, entry.rule)
        else:
            method = self.spider.parse
        return functools.partial(method, **kwargs) if kwargs else method

    def callback_name(self, entry: Entry) -> str:
        """The method ``entry``'s response goes to, as its author wrote it
        (``Spider.parse_item``): a CrawlSpider rule's callback, not the rule's plumbing."""
        if entry.callback:
            method = entry.callback
        elif entry.rule is not None:
            method = self.rules[entry.rule].callback or "parse"
        else:
            method = "parse"
        return f"{type(self.spider).__qualname__}.{method}"

    async def first_requests(self) -> list[Request | str]:
        """What the spider's ``start()`` yields (its ``start_requests()`` by default).

        Raises:
            ConfigError: it yielded an item, which hashcrawl does not take there.
        """
        requests: list[Request | str] = []
        if type(self.spider).start is Spider.start:  # start_requests() may block: a thread
            return list(await trio.to_thread.run_sync(_listed, self.spider.start_requests))
        async with contextlib.aclosing(self.spider.start()) as starts:
            async for thing in starts:
                if not isinstance(thing, Request | str):
                    raise ConfigError(
                        f"{self.name}.start() gave {thing!r:.80}: hashcrawl takes requests "
                        "and URLs there, not items"
                    )
                requests.append(thing)
        return requests

    def errback(self, entry: Entry) -> Callable[[Failure], Any] | None:
        return getattr(self.spider, entry.errback) if entry.errback else None

    def opened(self) -> None:
        for pipeline in self.pipelines:
            opening = getattr(pipeline, "open_spider", None)
            if opening is not None:
                opening(self.spider)

    def closed(self, reason: str) -> None:
        """The pipelines' ``close_spider``, then the spider's ``closed(reason)``; an error
        in one is logged and the others still run."""
        for step in [getattr(p, "close_spider", None) for p in self.pipelines]:
            if step is not None:
                try:
                    step(self.spider)
                except Exception:
                    log.exception("an item pipeline's close_spider failed")
        try:
            self.spider.closed(reason)
        except Exception:
            log.exception("%s.closed(%r) failed", self.name, reason)

    async def process_item(self, item: Any, call: Callable[..., Awaitable[Any]]) -> Any:
        """``item`` through each pipeline's ``process_item`` in turn, each made by
        ``call(method, item, spider)``; None if one raised :class:`~hashcrawl.DropItem`."""
        for pipeline in self.pipelines:
            step = getattr(pipeline, "process_item", None)
            if step is None:
                continue
            try:
                item = await call(step, item, self.spider)
                if inspect.isawaitable(item):
                    item = await item
            except DropItem as exc:
                log.info("dropped an item: %s", exc)
                return None
        return item


#: Scrapy's settings and the hashcrawl setting each sets (with how its value maps).
SCRAPY_SETTINGS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "DOWNLOAD_DELAY": ("delay", float),
    "CONCURRENT_REQUESTS": ("concurrency", int),
    "CONCURRENT_REQUESTS_PER_DOMAIN": ("per_host", int),
    "ROBOTSTXT_OBEY": ("obey_robots", bool),
    "USER_AGENT": ("user_agent", str),
    "DOWNLOAD_TIMEOUT": ("timeout", float),
    "DEPTH_LIMIT": ("max_depth", lambda v: int(v) or None),  # 0: no limit, as in Scrapy
    "COOKIES_ENABLED": ("cookies", bool),
    "RETRY_TIMES": ("max_attempts", lambda v: int(v) + 1),  # retries after the first try
    "DOWNLOAD_MAXSIZE": ("max_body", int),
    "CLOSESPIDER_PAGECOUNT": ("max_pages", lambda v: int(v) or None),
    "CLOSESPIDER_ITEMCOUNT": ("max_items", lambda v: int(v) or None),
    "CLOSESPIDER_TIMEOUT": ("max_time", lambda v: float(v) or None),
    "CLOSESPIDER_ERRORCOUNT": ("max_errors", lambda v: int(v) or None),
}


def scrapy_settings(spider: Spider | type[Spider] | None) -> dict[str, Any]:
    """The hashcrawl settings a spider's ``custom_settings`` give (by Scrapy's names or
    hashcrawl's own; ``ITEM_PIPELINES`` is the spider's, not a setting), its
    ``allowed_domains`` as ``allow_domains``, and its ``render_fetch_hosts`` (a list of
    hosts, or their comma-separated text).

    Raises:
        ConfigError: a name with no hashcrawl equivalent, or a value it cannot take.
    """
    given = dict((spider.custom_settings if spider is not None else None) or {})
    given.pop("ITEM_PIPELINES", None)
    known = {f.name for f in attrs.fields(Settings)}
    settings: dict[str, Any] = {}
    domains = getattr(spider, "allowed_domains", None)
    if domains:  # Scrapy's offsite filter: here, the crawl's scope
        settings["allow_domains"] = (domains,) if isinstance(domains, str) else tuple(domains)
    shared = getattr(spider, "render_fetch_hosts", None)
    if shared:  # the hosts its rendered pages may fetch from (--render-fetch-hosts)
        settings["render_fetch_hosts"] = (
            shared if isinstance(shared, str) else ",".join(map(str, shared))
        )
    for name, value in given.items():
        if name in known:
            settings[name] = value
        elif name in SCRAPY_SETTINGS:
            field, convert = SCRAPY_SETTINGS[name]
            try:
                settings[field] = convert(value)
            except (TypeError, ValueError):
                raise ConfigError(f"custom_settings: {name} cannot be {value!r:.80}") from None
        else:
            raise ConfigError(
                f"custom_settings: {name!r} has no hashcrawl equivalent; it knows "
                f"{', '.join(sorted(SCRAPY_SETTINGS))}, ITEM_PIPELINES and its own settings"
            )
    return settings


def pipelines_of(spider: Spider) -> list[Any]:
    """The spider's item pipelines, in the order of their ``ITEM_PIPELINES`` numbers.

    A pipeline is given as its class or as ``"module.Class"`` (a bare class name is
    looked up in the spider's own module).

    Raises:
        ConfigError: a name that cannot be imported.
    """
    listed = dict((spider.custom_settings or {}).get("ITEM_PIPELINES") or {})
    pipelines = []
    for given, _ in sorted(listed.items(), key=lambda pair: pair[1]):
        cls = _class_of(given, type(spider)) if isinstance(given, str) else given
        pipelines.append(cls())
    return pipelines


def _class_of(path: str, spider: type) -> Any:
    module_name, _, name = path.rpartition(".")
    try:
        module = (
            importlib.import_module(module_name) if module_name else sys.modules[spider.__module__]
        )
        return getattr(module, name)
    except (ImportError, AttributeError, KeyError):
        raise ConfigError(f"ITEM_PIPELINES: cannot import {path!r}") from None


def load_spider(spec: str) -> type[Spider]:
    """Load ``path/to/file.py[:ClassName]`` (the only Spider subclass, without a name).

    Raises:
        ConfigError: no such file, no such class, or not exactly one spider in the file.
    """
    path_text, _, name = spec.partition(":")
    path = Path(path_text)
    if not path.is_file():
        raise ConfigError(f"--spider file not found: {path_text!r}")
    module_spec = importlib.util.spec_from_file_location(f"_hashcrawl_spider_{path.stem}", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # the user's code: their line and error, not our traceback
        del sys.modules[module_spec.name]
        raise ConfigError(f"--spider {path_text}, {_where_it_failed(exc, path)}") from None
    spiders = {
        n: v
        for n, v in vars(module).items()
        if isinstance(v, type) and issubclass(v, Spider) and v.__module__ == module.__name__
    }
    if name:
        if name not in spiders:
            raise ConfigError(f"--spider: {path_text} has no Spider subclass named {name!r}")
        return spiders[name]
    if len(spiders) != 1:
        raise ConfigError(
            f"--spider: {path_text} defines {len(spiders)} spiders; name one with FILE:ClassName"
        )
    return next(iter(spiders.values()))


def _where_it_failed(exc: Exception, path: Path) -> str:
    """``line N: Kind: message`` of an exception raised loading the spider file."""
    line = exc.lineno if isinstance(exc, SyntaxError) else None
    if line is None:
        # The import system names the file by its absolute path, whatever --spider said.
        mine = path.resolve()
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if _same(f.filename, mine)]
        line = frames[-1].lineno if frames else None
    message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    where = f"line {line}: " if line is not None else ""
    return f"{where}{type(exc).__name__}: {message}{_scrapy_hint(exc)}"


def _same(filename: str, resolved: Path) -> bool:
    try:
        return Path(filename).resolve() == resolved
    except (OSError, RuntimeError, ValueError):  # "<string>", a loop of links
        return False


def _scrapy_hint(exc: Exception) -> str:
    """For a Scrapy spider not ported yet: how to port it."""
    if not (isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "scrapy"):
        return ""
    return (
        "; a Scrapy spider runs on hashcrawl once its imports say so: `import hashcrawl as "
        'scrapy` (see docs/tutorial.md, "Coming from Scrapy")'
    )
