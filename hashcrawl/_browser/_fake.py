"""A fake DevTools peer, for tests of what speaks to a browser (as httpx's MockTransport).

``FakeBrowser(handler)`` answers each command with what ``handler(method, params,
session)`` returns (a dict, or an awaitable of one); raising :class:`FakeError` answers
an error, returning ``None`` never answers. :meth:`FakeBrowser.emit` sends an event,
:meth:`FakeBrowser.hang_up` closes the pipe as a browser that dies.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing

from hashcrawl._browser._cdp import Connection, Session

Handler = Callable[
    [str, dict[str, Any], Session], "dict[str, Any] | Awaitable[dict[str, Any] | None] | None"
]


class FakeError(Exception):
    """Raised by a handler: the fake answers the command with this error message."""


class FakeBrowser:
    """A peer that speaks the DevTools protocol over an in-memory pipe.

    Args:
        handler: answers each command (see the module's docstring).
    """

    def __init__(self, handler: Handler) -> None:
        ours, theirs = trio.testing.memory_stream_pair()
        self.connection = Connection(ours, ours)
        self._pipe = theirs
        self._handler = handler
        self._lock = trio.Lock()
        self.received: list[tuple[str, dict[str, Any], Session]] = []

    async def serve(self) -> None:
        """Answer commands until the pipe closes (run it in a nursery)."""
        buffer = b""
        async with trio.open_nursery() as nursery:
            try:
                while chunk := await self._pipe.receive_some(65536):
                    buffer += chunk
                    while b"\0" in buffer:
                        raw, _, buffer = buffer.partition(b"\0")
                        nursery.start_soon(self._answer, json.loads(raw))
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                pass
            nursery.cancel_scope.cancel()

    async def _answer(self, message: dict[str, Any]) -> None:
        method, params = message["method"], message.get("params", {})
        session = message.get("sessionId")
        self.received.append((method, params, session))
        reply: dict[str, Any] = {"id": message["id"]}
        try:
            result = self._handler(method, params, session)
            if inspect.isawaitable(result):
                result = await result
        except FakeError as exc:
            reply["error"] = {"code": -32000, "message": str(exc)}
        else:
            if result is None:
                return
            reply["result"] = result
        await self._write(reply)

    async def emit(self, method: str, params: dict[str, Any], session: Session = None) -> None:
        """Send an event, as from ``session``."""
        event: dict[str, Any] = {"method": method, "params": params}
        if session is not None:
            event["sessionId"] = session
        await self._write(event)

    async def send_raw(self, data: bytes) -> None:
        """Send bytes as they are (a malformed message)."""
        async with self._lock:
            await self._pipe.send_all(data)

    async def _write(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            await self.send_raw(json.dumps(message).encode() + b"\0")

    async def hang_up(self) -> None:
        """Close the pipe, as a browser that dies."""
        await self._pipe.aclose()

    def methods(self) -> list[str]:
        """The methods of the commands received so far, in order."""
        return [method for method, _, _ in self.received]
