"""A rendered request's steps, acted out in its tab through the DevTools protocol.

The DOM steps are each one ``Runtime.evaluate`` (a wait is a sleep, a press two key
events, a scroll waits for what it set off): a selector, script or text goes in as a
JSON string literal, never spliced into code, and what a script throws is the step's
failure, a :class:`~hashcrawl.BrowserError` naming the step. The steps that reach
beyond the page (uploads, captures, a spider's method) are in ``_reach``; every step's
time is bounded by the page's render timeout.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import trio

from hashcrawl._browser._cdp import Connection, Session
from hashcrawl._browser._intercept import Traffic
from hashcrawl._browser._reach import NO_REACH, Reach, reach
from hashcrawl._core._steps import KEPT, Action, Step
from hashcrawl._exceptions import BrowserError

_WAIT_FOR = """new Promise((resolve, reject) => {
  const sel = %s, found = () => document.querySelector(sel) !== null;
  if (found()) return resolve(true);
  const seen = new MutationObserver(() => { if (found()) { seen.disconnect(); resolve(true); } });
  seen.observe(document, {childList: true, subtree: true, attributes: true});
  setTimeout(() => { seen.disconnect(); reject(new Error("nothing matched in time")); }, %d);
})"""
_CLICK = """(() => {
  const el = document.querySelector(%s);
  if (el === null) throw new Error("nothing matches");
  el.scrollIntoView(); el.click(); return true;
})()"""
# Scroll to the end; the height before, once the scroll event has been handled (the
# page's own handlers, added before ours, have run and begun their requests): a busy
# machine may deliver it a second late. Nothing moved, no event comes: at once.
_SCROLL = """new Promise(resolve => {
  const height = document.documentElement.scrollHeight, before = window.scrollY;
  const handled = () => setTimeout(() => resolve(height), 0);
  window.addEventListener("scroll", handled, {once: true});
  window.scrollTo(0, height);
  if (window.scrollY === before) {
    window.removeEventListener("scroll", handled);
    resolve(height);
  }
})"""
# "grew" as soon as the page is taller than the height given, "quiet" once its DOM has
# not changed for the first wait or, after a change, for the quiet time; "busy" at the
# end of the longest wait.
_SETTLE = """new Promise(resolve => {
  const height = %d, first = %d, quiet = %d;
  const grown = () => document.documentElement.scrollHeight > height;
  let timer = setTimeout(() => end("quiet"), first);
  const longest = setTimeout(() => end("busy"), %d);
  const seen = new MutationObserver(() => {
    if (grown()) return end("grew");
    clearTimeout(timer);
    timer = setTimeout(() => end("quiet"), quiet);
  });
  const end = why => {
    seen.disconnect(); clearTimeout(timer); clearTimeout(longest); resolve(why);
  };
  seen.observe(document, {childList: true, subtree: true, attributes: true, characterData: true});
  if (grown()) end("grew");
})"""
#: Seconds one scroll waits at most for what it set off (the render timeout bounds it too).
SCROLL_WITHIN = 10.0
#: Milliseconds without a request or a change to its DOM after which a page that did not
#: grow is taken as done (the scroll set nothing off, or what it set off changed no
#: height). As Playwright's "networkidle": long enough for a request a loaded machine
#: begins late, paid only by a scroll that sets nothing off.
QUIET_MS = 500
#: Milliseconds a page may take to change once the requests a scroll set off are all
#: answered (its scripts read the answers first; a loaded machine is slow at it).
ANSWERED_MS = 1000
# The value property's own setter, so frameworks that watch it (React) see the change.
_FILL = """(() => {
  const el = document.querySelector(%s);
  if (el === null) throw new Error("nothing matches");
  const own = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(el), "value");
  el.focus();
  if (own && own.set) own.set.call(el, %s); else el.value = %s;
  el.dispatchEvent(new Event("input", {bubbles: true}));
  el.dispatchEvent(new Event("change", {bubbles: true}));
  return true;
})()"""
_FOCUS = """(() => {
  const el = document.querySelector(%s);
  if (el === null) throw new Error("nothing matches");
  el.focus(); return true;
})()"""
#: key -> (code, Windows virtual key code, text typed)
_KEYS = {
    "Enter": ("Enter", 13, "\r"),
    "Tab": ("Tab", 9, ""),
    "Escape": ("Escape", 27, ""),
    "Backspace": ("Backspace", 8, ""),
    "Delete": ("Delete", 46, ""),
    "Space": ("Space", 32, " "),
    "ArrowUp": ("ArrowUp", 38, ""),
    "ArrowDown": ("ArrowDown", 40, ""),
    "ArrowLeft": ("ArrowLeft", 37, ""),
    "ArrowRight": ("ArrowRight", 39, ""),
    "PageUp": ("PageUp", 33, ""),
    "PageDown": ("PageDown", 34, ""),
    "Home": ("Home", 36, ""),
    "End": ("End", 35, ""),
}
DOCUMENT = """[location.href, (document.doctype ?
  new XMLSerializer().serializeToString(document.doctype) + "\\n" : "") +
  document.documentElement.outerHTML]"""


async def evaluate(connection: Connection, session: Session, expression: str, step: str) -> Any:
    """The value of ``expression`` in the page (promises awaited).

    Raises:
        BrowserError: the script threw, or the browser answered an error.
    """
    answer = await connection.send(
        "Runtime.evaluate",
        {"expression": expression, "returnByValue": True, "awaitPromise": True},
        session,
    )
    thrown = answer.get("exceptionDetails")
    if thrown is not None:
        said = thrown.get("exception", {}).get("description") or thrown.get("text", "")
        raise BrowserError(f"step {step} failed: {str(said)[:200]}")
    return answer.get("result", {}).get("value")


async def act(
    connection: Connection,
    session: Session,
    step: Step,
    means: Reach = NO_REACH,
    *,
    traffic: Traffic | None = None,
) -> Any:
    """Do one step; the value of a step whose value is kept (``KEPT``), else None.
    ``traffic`` is the page's requests (a scroll waits for those it set off)."""
    literal = json.dumps(step.text)
    named = f"{step.action.value} {step.text[:80]!r}" if step.text else step.action.value
    if step.action is Action.WAIT:
        await trio.sleep(step.seconds)
    elif step.action is Action.WAIT_FOR:
        await evaluate(connection, session, _WAIT_FOR % (literal, int(step.seconds * 1000)), named)
    elif step.action is Action.CLICK:
        await evaluate(connection, session, _CLICK % literal, named)
    elif step.action is Action.SCROLL:
        for _ in range(step.times):
            await _scroll(connection, session, traffic or Traffic(), named)
    elif step.action is Action.EVALUATE:
        return await evaluate(connection, session, step.text, named)
    elif step.action is Action.FILL:
        typed = json.dumps(step.value)
        await evaluate(connection, session, _FILL % (literal, typed, typed), named)
    elif step.action is Action.PRESS:
        await _press(connection, session, step, named)
    else:
        return await reach(
            connection, session, step, means, functools.partial(act, traffic=traffic)
        )
    return None


async def _scroll(connection: Connection, session: Session, traffic: Traffic, named: str) -> None:
    """Scroll to the end, then wait until what that set off is done: the scroll event
    handled, every request begun since answered, and then the page grown or its DOM
    quiet (``QUIET_MS`` if the scroll set nothing off; else up to ``ANSWERED_MS`` for a
    first change, ``QUIET_MS`` after the last). At most ``SCROLL_WITHIN`` seconds: then
    the steps go on."""
    mark = traffic.begun
    with trio.move_on_after(SCROLL_WITHIN):
        height = _whole(await evaluate(connection, session, _SCROLL, named))
        while True:
            await traffic.quiet_since(mark)
            begun = traffic.begun
            first = ANSWERED_MS if begun > mark else QUIET_MS
            settle = _SETTLE % (height, first, QUIET_MS, int(SCROLL_WITHIN * 1000))
            await evaluate(connection, session, settle, named)
            if traffic.begun == begun and not traffic.open_since(mark):
                return


def _whole(value: Any) -> int:
    """A page's answer as a height (a hostile page may answer anything)."""
    if isinstance(value, int | float) and math.isfinite(value):
        return int(min(max(value, 0), 2**31))
    return 0


async def _press(connection: Connection, session: Session, step: Step, named: str) -> None:
    """A key down and up, on the element ``step`` selects (focused first) if it names one."""
    if step.text:
        await evaluate(connection, session, _FOCUS % json.dumps(step.text), named)
    code, virtual, text = _KEYS.get(step.value, (f"Key{step.value.upper()}", 0, step.value))
    key = " " if step.value == "Space" else step.value
    down = {"type": "keyDown", "key": key, "code": code, "windowsVirtualKeyCode": virtual}
    if text:
        down["text"] = text
    await connection.send("Input.dispatchKeyEvent", down, session)
    up = {"type": "keyUp", "key": key, "code": code, "windowsVirtualKeyCode": virtual}
    await connection.send("Input.dispatchKeyEvent", up, session)


async def act_all(
    connection: Connection,
    session: Session,
    steps: tuple[Step, ...],
    means: Reach = NO_REACH,
    *,
    traffic: Traffic | None = None,
) -> tuple[Any, ...]:
    """Do ``steps`` in order; the values of the steps whose value is kept, in order."""
    values = []
    for step in steps:
        value = await act(connection, session, step, means, traffic=traffic)
        if step.action in KEPT:
            values.append(value)
    return tuple(values)
