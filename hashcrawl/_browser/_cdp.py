"""The DevTools protocol client: commands out with ids, answers and events in.

CDP is JSON-RPC over a pipe: each message is a JSON object ended by a NUL byte. A
command carries an ``id``, a ``method``, ``params`` and, for a page, the ``sessionId``
that ``Target.attachToTarget`` (flatten mode) gave; its answer carries the same ``id``
and a ``result`` or an ``error``; an event carries a ``method``, ``params`` and the
``sessionId`` it came from. One :meth:`Connection.run` task reads every message; a
command waits for its own answer; a listener gets its session's events.

The browser's errors become hashcrawl's: an ``error`` answer is a
:class:`~hashcrawl.BrowserError`, the pipe closing fails every waiting command and
listener with :class:`~hashcrawl.BrowserGone`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import attrs
import trio

from hashcrawl._exceptions import BrowserError, BrowserGone

#: The largest message read from the browser (a page's DOM, a screenshot).
MAX_MESSAGE = 64 * 1024 * 1024
#: Events a listener may have unread before it is closed (a listener that stops
#: reading must not grow the worker's memory).
MAX_UNREAD_EVENTS = 10_000
Session = str | None  # a flatten-mode session id; None for the browser itself


@attrs.frozen(kw_only=True)
class Event:
    """One event: its method, params and the session it came from."""

    method: str
    params: dict[str, Any]
    session: Session


@attrs.define
class _Waiting:
    """A command waiting for its answer."""

    done: trio.Event = attrs.Factory(trio.Event)
    answer: dict[str, Any] | None = None


class Connection:
    """A DevTools connection over a pair of byte streams (the browser's pipe).

    Args:
        send: the stream to the browser (its fd 3).
        receive: the stream from it (its fd 4).
        max_message: the most bytes one message from the browser may hold.
    """

    def __init__(
        self,
        send: trio.abc.SendStream,
        receive: trio.abc.ReceiveStream,
        *,
        max_message: int = MAX_MESSAGE,
    ) -> None:
        self._send, self._receive, self._max = send, receive, max_message
        self._send_lock = trio.Lock()
        self._ids = 0
        self._waiting: dict[int, _Waiting] = {}
        self._listeners: dict[Session, list[trio.MemorySendChannel[Event]]] = {}
        self.closed: str | None = None  # why, once the pipe is gone

    async def send(
        self, method: str, params: dict[str, Any] | None = None, session: Session = None
    ) -> dict[str, Any]:
        """Send a command and return its ``result``.

        Raises:
            BrowserError: the browser answered an error.
            BrowserGone: the pipe closed before the answer came.
        """
        if self.closed is not None:
            raise BrowserGone(f"the browser is gone ({self.closed}): {method} not sent")
        self._ids += 1
        ident, waiting = self._ids, _Waiting()
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        self._waiting[ident] = waiting
        try:
            await self._write(message)
            await waiting.done.wait()
        finally:
            del self._waiting[ident]
        return _result(method, waiting.answer)

    async def _write(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\0"
        try:
            async with self._send_lock:
                await self._send.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._close(f"writing failed: {type(exc).__name__}")
            raise BrowserGone(f"the browser is gone: {message['method']} not sent") from exc

    @contextlib.contextmanager
    def listen(self, session: Session) -> Any:
        """A receive channel of ``session``'s events while the block runs; it ends (the
        channel closes) when the pipe does, or when more than ``MAX_UNREAD_EVENTS`` wait."""
        send, receive = trio.open_memory_channel[Event](MAX_UNREAD_EVENTS)
        if self.closed is not None:
            send.close()
        else:
            self._listeners.setdefault(session, []).append(send)
        try:
            yield receive
        finally:
            listeners = self._listeners.get(session, [])
            if send in listeners:
                listeners.remove(send)
                if not listeners:
                    del self._listeners[session]
            send.close()
            receive.close()

    async def run(self) -> None:
        """Read every message until the pipe closes; then fail what still waits."""
        try:
            async for message in self._messages():
                self._dispatch(message)
            self._close("the pipe closed")
        except BrowserError as exc:
            self._close(str(exc))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._close(f"reading failed: {type(exc).__name__}")
        finally:
            self._close("the connection was closed")

    async def _messages(self) -> AsyncIterator[dict[str, Any]]:
        buffer = bytearray()
        while chunk := await self._receive.receive_some(256 * 1024):
            buffer += chunk
            while (end := buffer.find(b"\0")) >= 0:
                raw = bytes(buffer[:end])
                del buffer[: end + 1]
                yield _decoded(raw)
            if len(buffer) > self._max:
                raise BrowserError(f"a DevTools message over {self._max} bytes")

    def _dispatch(self, message: dict[str, Any]) -> None:
        ident = message.get("id")
        if ident is not None:
            waiting = self._waiting.get(ident) if isinstance(ident, int) else None
            if waiting is not None:  # an answer to a command abandoned (cancelled) is dropped
                waiting.answer = message
                waiting.done.set()
            return
        method, params = message.get("method"), message.get("params", {})
        session = message.get("sessionId")
        if not isinstance(method, str) or not isinstance(params, dict):
            return
        event = Event(method=method, params=params, session=session)
        for listener in list(self._listeners.get(session, ())):
            try:
                listener.send_nowait(event)
            except trio.WouldBlock:  # a listener far behind is ended, not grown
                listener.close()
                self._listeners[session].remove(listener)
            except trio.ClosedResourceError:
                pass

    def _close(self, why: str) -> None:
        if self.closed is not None:
            return
        self.closed = why
        for waiting in self._waiting.values():
            waiting.done.set()  # with no answer: the command raises BrowserGone
        for listeners in self._listeners.values():
            for listener in listeners:
                listener.close()
        self._listeners.clear()

    async def aclose(self) -> None:
        """Close both streams; every waiting command fails with BrowserGone."""
        self._close("the connection was closed")
        with trio.CancelScope(shield=True):
            await self._send.aclose()
            await self._receive.aclose()


def _decoded(raw: bytes) -> dict[str, Any]:
    try:
        message = json.loads(raw)
    except ValueError as exc:
        raise BrowserError(f"the browser sent a message that is not JSON: {raw[:80]!r}") from exc
    if not isinstance(message, dict):
        raise BrowserError(f"the browser sent a message that is not an object: {raw[:80]!r}")
    return message


def _result(method: str, answer: dict[str, Any] | None) -> dict[str, Any]:
    if answer is None:
        raise BrowserGone(f"the browser is gone: {method} got no answer")
    error = answer.get("error")
    if error is not None:
        said = error.get("message", error) if isinstance(error, dict) else error
        raise BrowserError(f"{method} failed: {str(said)[:200]}")
    result = answer.get("result", {})
    return result if isinstance(result, dict) else {}
