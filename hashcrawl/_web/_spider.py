"""Spiders: a class bundling start URLs and parse callbacks that requests name."""

from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from hashcrawl._exceptions import ConfigError
from hashcrawl._web._models import Response


class Spider:
    """Subclass to crawl with your own callbacks.

    ``start_urls`` are submitted when a worker starts (URLs seen before are left out).
    ``parse`` handles every response whose request names no callback; a request may
    name another method of the subclass with ``Request(url, callback="parse_item")``.
    Only methods the subclass defines itself can be named: an entry in Redis can never
    call a dunder or one of hashcrawl's own methods.

    ``blocking = True`` says the spider's callbacks block (a synchronous database call,
    heavy computation): each is then run in a thread (``trio.to_thread``) so the worker
    keeps fetching, heartbeating and honouring ``--parse-timeout`` meanwhile. Leave it
    False for callbacks that only read the response: a thread per page costs more than
    such a callback.
    """

    start_urls: ClassVar[Sequence[str]] = ()
    blocking: ClassVar[bool] = False

    def parse(self, response: Response) -> Any:
        """Default: one item per page, and follow every link."""
        yield {"url": response.request.url, "status": response.status, "title": response.title()}
        yield from response.links()


def callback_of(spider: Spider, name: str) -> Callable[[Response], Any]:
    """The method of ``spider`` an entry names, if it may be named.

    Raises:
        ConfigError: the name is not a callback of this spider.
    """
    if name == "parse" or name in _own_methods(type(spider)):
        return getattr(spider, name)  # type: ignore[no-any-return]
    raise ConfigError(f"callback {name!r} is not a method of {type(spider).__name__}")


def _own_methods(cls: type) -> set[str]:
    """Public methods defined by ``cls`` and its bases below :class:`Spider`."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is Spider or klass is object:
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") and inspect.isfunction(value) and not hasattr(Spider, name):
                names.add(name)
    return names


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
        if isinstance(v, type) and issubclass(v, Spider) and v is not Spider
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
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
        line = frames[-1].lineno if frames else None
    message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    where = f"line {line}: " if line is not None else ""
    return f"{where}{type(exc).__name__}: {message}"
