"""The DevTools client, against the fake peer: ids, sessions, events, errors, a dying pipe."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from hashcrawl import BrowserError, BrowserGone, FetchError
from hashcrawl._browser._actions import act, act_all
from hashcrawl._browser._cdp import MAX_UNREAD_EVENTS, Connection
from hashcrawl._browser._fake import FakeBrowser, FakeError
from hashcrawl._browser._intercept import Traffic
from hashcrawl._core._steps import Step


def echo(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
    return {"method": method, "params": params, "session": session}


async def test_each_command_gets_its_own_answer_when_answers_come_out_of_order() -> None:
    """A slow answer to the first command does not go to the second, which is answered first."""
    release = trio.Event()

    async def handler(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
        if method == "Slow.one":
            await release.wait()
        return {"was": method}

    fake = FakeBrowser(handler)
    got: dict[str, Any] = {}

    async def ask(method: str) -> None:
        got[method] = await fake.connection.send(method)
        release.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fake.serve)
        nursery.start_soon(fake.connection.run)
        async with trio.open_nursery() as asks:
            asks.start_soon(ask, "Slow.one")
            asks.start_soon(ask, "Fast.two")
        nursery.cancel_scope.cancel()
    assert got == {"Slow.one": {"was": "Slow.one"}, "Fast.two": {"was": "Fast.two"}}


async def test_a_command_to_a_session_carries_its_session_id() -> None:
    """A command for a page's session is sent with that ``sessionId``."""
    fake = FakeBrowser(echo)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fake.serve)
        nursery.start_soon(fake.connection.run)
        answer = await fake.connection.send("Page.enable", {"a": 1}, "S1")
        nursery.cancel_scope.cancel()
    assert answer == {"method": "Page.enable", "params": {"a": 1}, "session": "S1"}


async def test_an_error_answer_is_a_browser_error_naming_the_method() -> None:
    """The browser's error is hashcrawl's: a BrowserError, a FetchError, with its message."""

    def handler(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
        raise FakeError("No target with given id found")

    fake = FakeBrowser(handler)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fake.serve)
        nursery.start_soon(fake.connection.run)
        with pytest.raises(BrowserError, match=r"Target\.closeTarget failed: No target") as caught:
            await fake.connection.send("Target.closeTarget", {"targetId": "x"})
        nursery.cancel_scope.cancel()
    assert isinstance(caught.value, FetchError)


async def test_events_go_to_the_listeners_of_their_session_only() -> None:
    """An event of session A reaches A's listener, not B's, nor the browser's."""
    fake = FakeBrowser(echo)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fake.connection.run)
        with (
            fake.connection.listen("A") as a,
            fake.connection.listen("B") as b,
            fake.connection.listen(None) as browser,
        ):
            await fake.emit("Page.loadEventFired", {"n": 1}, "A")
            await fake.emit("Target.targetCreated", {"n": 2})
            first, second = await a.receive(), await browser.receive()
            with pytest.raises(trio.WouldBlock):
                b.receive_nowait()
        nursery.cancel_scope.cancel()
    assert (first.method, first.params, first.session) == ("Page.loadEventFired", {"n": 1}, "A")
    assert (second.method, second.session) == ("Target.targetCreated", None)


async def test_the_pipe_closing_fails_every_waiting_command_and_ends_every_listener() -> None:
    """A browser that dies mid-command: the command raises BrowserGone, a listener's
    channel ends, and a command sent afterwards fails at once."""
    fake = FakeBrowser(lambda method, params, session: None)  # never answers
    outcome: list[BaseException] = []

    async def wait_for_answer() -> None:
        try:
            await fake.connection.send("Page.navigate", {"url": "http://a.test/"}, "S")
        except BrowserGone as exc:
            outcome.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fake.serve)
        nursery.start_soon(fake.connection.run)
        with fake.connection.listen("S") as events:
            nursery.start_soon(wait_for_answer)
            await trio.testing.wait_all_tasks_blocked()
            await fake.hang_up()
            ended = [event async for event in events]
        with pytest.raises(BrowserGone, match="gone"):
            await fake.connection.send("Browser.getVersion")
    assert len(outcome) == 1 and "Page.navigate got no answer" in str(outcome[0])
    assert ended == []


@pytest.mark.parametrize(
    ("data", "said"), [(b"{not json\0", "not JSON"), (b"[1, 2]\0", "not an object")]
)
async def test_a_malformed_message_ends_the_connection_with_its_reason(
    data: bytes, said: str
) -> None:
    """Bytes from the browser that are not a JSON object close the connection, saying why."""
    fake = FakeBrowser(echo)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fake.connection.run)
        await fake.send_raw(data)
        await trio.testing.wait_all_tasks_blocked()
    assert fake.connection.closed is not None and said in fake.connection.closed


async def test_a_message_over_the_limit_ends_the_connection() -> None:
    """A message longer than ``max_message`` is not buffered further."""
    fake = FakeBrowser(echo)
    connection = Connection(fake.connection._send, fake.connection._receive, max_message=1000)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        await fake.send_raw(b"x" * 5000)
        await trio.testing.wait_all_tasks_blocked()
    assert connection.closed is not None and "over 1000 bytes" in connection.closed


async def test_a_listener_that_stops_reading_is_closed_not_grown() -> None:
    """Past ``MAX_UNREAD_EVENTS`` unread, a listener's channel ends after what it holds."""
    fake = FakeBrowser(echo)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fake.connection.run)
        with fake.connection.listen("S") as events:
            for n in range(MAX_UNREAD_EVENTS + 5):
                await fake.emit("Network.dataReceived", {"n": n}, "S")
            await trio.testing.wait_all_tasks_blocked()
            held = [event async for event in events]
        nursery.cancel_scope.cancel()
    assert len(held) == MAX_UNREAD_EVENTS


async def test_a_click_step_sends_its_selector_as_a_string_literal_not_code() -> None:
    """A selector that tries to close the string stays inside it: JSON-quoted."""
    sent: list[str] = []

    def handler(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
        sent.append(params["expression"])
        return {"result": {"type": "boolean", "value": True}}

    fake = FakeBrowser(handler)
    hostile = 'a"); steal(); ("'
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fake.serve)
        nursery.start_soon(fake.connection.run)
        await act(fake.connection, "S", Step.of({"click": hostile}))
        nursery.cancel_scope.cancel()
    assert '"a\\"); steal(); (\\""' in sent[0]


async def test_a_step_whose_script_throws_is_a_browser_error_naming_the_step() -> None:
    """What the page throws fails the step, and so the fetch, naming the step."""

    def handler(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
        return {
            "result": {},
            "exceptionDetails": {"exception": {"description": "Error: nothing matches"}},
        }

    fake = FakeBrowser(handler)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fake.serve)
        nursery.start_soon(fake.connection.run)
        with pytest.raises(BrowserError, match="step click '#more' failed: Error: nothing matches"):
            await act(fake.connection, "S", Step.of({"click": "#more"}))
        nursery.cancel_scope.cancel()


async def test_evaluate_steps_give_their_values_in_order() -> None:
    """Only evaluate steps give values; the others give none."""

    def handler(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
        return {"result": {"value": params["expression"]}}

    fake = FakeBrowser(handler)
    steps = (Step.of({"evaluate": "1"}), Step.of({"click": "b"}), Step.of({"evaluate": "2"}))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fake.serve)
        nursery.start_soon(fake.connection.run)
        values = await act_all(fake.connection, "S", steps)
        nursery.cancel_scope.cancel()
    assert values == ("1", "2")


async def test_a_scroll_waits_for_the_request_it_set_off_before_judging_the_page() -> None:
    """The page begins a request when scrolled: the step asks whether the page settled
    only once that request is answered, and ends when it has grown."""
    traffic = Traffic()
    order: list[str] = []
    answered = trio.Event()

    def handler(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
        if "scrollTo" in params["expression"]:
            order.append("scrolled")
            number = traffic.begin()  # the page's scroll handler fetches
            nursery.start_soon(answer, number)
            return {"result": {"value": 100}}
        order.append("settled?")
        return {"result": {"value": "grew"}}

    async def answer(number: int) -> None:
        await trio.testing.wait_all_tasks_blocked()
        order.append("answered")
        traffic.end(number)
        answered.set()

    fake = FakeBrowser(handler)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fake.serve)
        nursery.start_soon(fake.connection.run)
        await act(fake.connection, "S1", Step.of({"scroll": "end"}), traffic=traffic)
        nursery.cancel_scope.cancel()
    assert order == ["scrolled", "answered", "settled?"]
    assert "height = 100, first = 1000, quiet = 500" in fake.received[-1][1]["expression"]


async def test_a_scroll_whose_page_answers_no_height_still_ends() -> None:
    """A hostile page's answer to the scroll (not a number) is read as height 0."""

    def handler(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
        value = {"no": "height"} if "scrollTo" in params["expression"] else "quiet"
        return {"result": {"value": value}}

    fake = FakeBrowser(handler)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fake.serve)
        nursery.start_soon(fake.connection.run)
        await act(fake.connection, "S1", Step.of({"scroll": "end", "times": 2}))
        nursery.cancel_scope.cancel()
    assert fake.methods() == ["Runtime.evaluate"] * 4
    assert "height = 0, first = 500" in fake.received[-1][1]["expression"]
