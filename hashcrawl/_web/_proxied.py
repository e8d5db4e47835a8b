"""The proxies a fetcher sends through: the worker's pool (``--proxy``), and a request's
own (``Request(proxy=...)``, ``meta["proxy"]``) when the worker allows it.

httpx and httpcore take one proxy per client or pool, so each proxy gets its own
:class:`OriginPools` (a pool per origin, as direct requests have), made when first used.
A host goes through the proxy :class:`ProxyChoice` gives it, and moves to the next one
when a request through it fails on the way (a connection error, a timeout, garbage),
is refused by the proxy (407) or answered with a status of ``retry_status``.

A request's proxy comes from the queue, which whoever writes Redis writes: it is taken
only with ``allow_request_proxy``, never with credentials (those stay in ``--proxy``;
a request naming a pool proxy's place is sent with that proxy's), and its address is
judged like a page's. Everything refused here is a :class:`Refused` of one line.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

import attrs

from hashcrawl._core._proxies import Proxy, ProxyChoice
from hashcrawl._exceptions import ConfigError, Refused
from hashcrawl._web._addresses import AddressPolicy, literal_address
from hashcrawl._web._models import Request
from hashcrawl._web._pools import OriginPools

#: Statuses that move a host to the next proxy whatever ``retry_status`` says.
PROXY_REFUSED = 407
#: The most proxies of requests' own kept open at once (the least recently used close).
MAX_REQUEST_PROXIES = 16
ALLOW_FLAG = "--allow-request-proxy"
_DEFAULT_PORTS = {"http": 80, "https": 443}


@attrs.frozen
class Route:
    """How one request goes: through ``proxy`` (index ``index`` of the pool, or None
    for a request's own), by ``pools``, for ``host``'s sake."""

    proxy: Proxy
    pools: OriginPools
    host: str
    index: int | None


class ProxyRoutes:
    """Chooses the proxy of each request and keeps a connection pool per proxy.

    Args:
        proxies: the worker's pool (may be empty: then only requests' own proxies).
        policy: the addresses a proxy may have.
        retry_status: statuses that move a host to the next proxy of the pool.
        allow_request_proxy: take a request's own proxy (else such a request is refused).
    """

    def __init__(
        self,
        proxies: Sequence[Proxy],
        *,
        policy: AddressPolicy,
        max_connections: int,
        max_per_host: int,
        retry_status: Iterable[int] = (),
        allow_request_proxy: bool = False,
    ) -> None:
        self.proxies = tuple(proxies)
        self.retry_status = frozenset((PROXY_REFUSED, *retry_status))
        self.allow_request_proxy = allow_request_proxy
        self._policy, self._sizes = policy, (max_connections, max_per_host)
        self._choice = ProxyChoice(max(1, len(self.proxies)))
        self._pools = [self._pools_for(proxy) for proxy in self.proxies]
        self._places = {proxy.place: proxy for proxy in self.proxies}
        self._own: OrderedDict[tuple[str, str, int], OriginPools] = OrderedDict()

    def _pools_for(self, proxy: Proxy) -> OriginPools:
        most, per_host = self._sizes
        return OriginPools.through(
            proxy, max_connections=most, max_per_host=per_host, policy=self._policy
        )

    async def route(self, request: Request) -> Route | None:
        """The way ``request`` goes; None: directly (no pool and no proxy of its own).

        Raises:
            Refused: its own proxy is not allowed, malformed, or carries credentials;
                or its host is an IP address the address rules refuse.
        """
        asked = request.asked_proxy
        if asked is None and not self.proxies:
            return None
        name, host = _host_of(request.url)
        literal = literal_address(name)
        if literal is not None and not self._policy.allows(literal):
            raise Refused(self._policy.refusal(name, [literal]))
        if asked is not None:
            return await self._own_route(asked, request.url, host)
        index = self._choice.index(host)
        return Route(self.proxies[index], self._pools[index], host, index)

    async def _own_route(self, asked: str, url: str, host: str) -> Route:
        proxy = _request_proxy(asked, url, self.allow_request_proxy)
        known = self._places.get(proxy.place)
        if known is not None:  # a proxy of the pool: its credentials, and its pools
            index = self.proxies.index(known)
            return Route(known, self._pools[index], host, None)
        pools = self._own.get(proxy.place)
        if pools is None:
            pools = self._own[proxy.place] = self._pools_for(proxy)
            if len(self._own) > MAX_REQUEST_PROXIES:
                await self._own.popitem(last=False)[1].aclose()
        self._own.move_to_end(proxy.place)
        return Route(proxy, pools, host, None)

    def moved(self, route: Route, why: str) -> str:
        """``why`` a request through ``route`` failed, its host moved on to the next
        proxy of the pool (a request's own proxy moves nothing)."""
        if route.index is None:
            return f"{why} (through proxy {route.proxy.shown})"
        after = self.proxies[self._choice.failed(route.host, route.index)]
        if after is route.proxy:
            return f"{why} (through proxy {route.proxy.shown}, the pool's only one)"
        return (
            f"{why} (through proxy {route.proxy.shown}; the host goes through {after.shown} next)"
        )

    async def aclose(self) -> None:
        for pools in (*self._pools, *self._own.values()):
            await pools.aclose()


def _request_proxy(asked: str, url: str, allowed: bool) -> Proxy:
    """The proxy a request asked for, if this worker may take it.

    Raises:
        Refused: not allowed, malformed, or with credentials (which Redis would hold).
    """
    if not allowed:
        raise Refused(
            f"request {url:.100} names a proxy of its own; a worker takes a request's "
            f"proxy only with {ALLOW_FLAG}"
        )
    try:
        return Proxy.of_request(asked)
    except ConfigError as exc:
        raise Refused(f"request {url:.100}: {exc}") from None


def _host_of(url: str) -> tuple[str, str]:
    """The host name a request goes to, and with a port not the scheme's: the key that
    stays on one proxy.

    Raises:
        Refused: the URL has no valid host or port.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise Refused(f"request {url[:100]!r} has no valid host or port") from None
    name = (parts.hostname or "").lower()
    if port is None or port == _DEFAULT_PORTS.get(parts.scheme):
        return name, name
    return name, f"{name}:{port}"


def pool_of(urls: Iterable[str]) -> tuple[Proxy, ...]:
    """The proxies ``urls`` name, each checked.

    Raises:
        ConfigError: one is not an http(s) proxy URL (no password repeated).
    """
    proxies = []
    for url in urls:
        try:
            proxies.append(Proxy.parse(url))
        except ConfigError as exc:
            raise ConfigError(f"--proxy: {exc}") from None
    return tuple(proxies)
