"""A rendered request's steps, acted out in its tab through the DevTools protocol.

Each step is one ``Runtime.evaluate`` (a wait is a sleep): a selector or script goes
in as a JSON string literal, never spliced into code, and what a script throws is the
step's failure, a :class:`~hashcrawl.BrowserError` naming the step.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from hashcrawl._browser._cdp import Connection, Session
from hashcrawl._core._steps import Action, Step
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
# Scroll to the end, then wait (at most a second) for the page to grow.
_SCROLL = """new Promise(resolve => {
  const height = document.documentElement.scrollHeight;
  window.scrollTo(0, height);
  const grown = new MutationObserver(() => {
    if (document.documentElement.scrollHeight > height) { grown.disconnect(); resolve(true); }
  });
  grown.observe(document, {childList: true, subtree: true});
  setTimeout(() => { grown.disconnect(); resolve(false); }, 1000);
})"""
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


async def act(connection: Connection, session: Session, step: Step) -> Any:
    """Do one step; an evaluate step's value is returned, every other's None."""
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
            await evaluate(connection, session, _SCROLL, named)
    elif step.action is Action.EVALUATE:
        return await evaluate(connection, session, step.text, named)
    return None


async def act_all(
    connection: Connection, session: Session, steps: tuple[Step, ...]
) -> tuple[Any, ...]:
    """Do ``steps`` in order; the values of the evaluate steps, in order."""
    values = []
    for step in steps:
        value = await act(connection, session, step)
        if step.action is Action.EVALUATE:
            values.append(value)
    return tuple(values)
