"""The steps that reach beyond the page, each bounded: files uploaded from the upload
directory only, screenshots and PDFs capped in bytes, a spider's own method given the
live page.

What they may use is a :class:`Reach`: the upload directory (``--browser-upload-dir``;
none, no upload) and the spider's methods by name (a ``call`` of anything else fails).
The owner refused such steps already when it read them (``_steps.steps_refusal``); this
is the check at the moment of use, where the path is resolved on disk.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from hashcrawl._browser._cdp import Connection, Session
from hashcrawl._core._steps import Action, Step
from hashcrawl._exceptions import BrowserError

MAX_CAPTURE = 16 * 1024 * 1024  # the most bytes one screenshot or PDF may hold
MAX_SHOT_HEIGHT = 16_384  # CSS pixels of a "full" screenshot (an endless page is cut)
MAX_PDF_PAGES = 100  # pages of one PDF
MAX_UPLOAD = 32 * 1024 * 1024  # the most bytes of one uploaded file
_PAPERS = {"a4": (8.27, 11.69), "letter": (8.5, 11.0)}  # inches
_FILE_INPUT = """(() => {
  const el = document.querySelector(%s);
  if (el === null) throw new Error("nothing matches");
  if (!(el instanceof HTMLInputElement) || el.type !== "file") throw new Error("not a file input");
  return el;
})()"""

Act = Callable[[Connection, Session, Step, "Reach"], Awaitable[Any]]


@attrs.frozen(kw_only=True)
class Reach:
    """What steps may use beyond the page.

    Args:
        upload_dir: the directory set_input_files takes files from (None: no uploads).
        method: the spider's method of that name (one of its own classes'), or None.
    """

    upload_dir: str | None = None
    method: Callable[[str], Callable[[Any], Any] | None] = lambda name: None


NO_REACH = Reach()


async def reach(
    connection: Connection, session: Session, step: Step, means: Reach, act: Act
) -> Any:
    """Do an upload, capture or call step; a capture's bytes, a call's return value."""
    if step.action is Action.SET_INPUT_FILES:
        await _upload(connection, session, step, means)
        return None
    if step.action is Action.SCREENSHOT:
        return await _screenshot(connection, session, full=step.text == "full")
    if step.action is Action.PDF:
        return await _pdf(connection, session, step.text)
    if step.action is Action.CALL:
        return await _call(connection, session, step, means, act)
    raise BrowserError(f"step {step.action.value} is not one this browser does")


def upload_paths(upload_dir: str | None, names: tuple[str, ...]) -> list[str]:
    """The real paths of ``names`` inside ``upload_dir``: regular files of at most
    ``MAX_UPLOAD`` bytes, none outside the directory by ``..`` or a symbolic link.

    Raises:
        BrowserError: no upload directory, or a name that breaks one of the rules.
    """
    if upload_dir is None:
        raise BrowserError("step set_input_files needs --browser-upload-dir, which is not set")
    root = os.path.realpath(upload_dir)
    paths = []
    for name in names:
        path = os.path.realpath(os.path.join(root, name))
        if os.path.commonpath([root, path]) != root or path == root:
            raise BrowserError(
                f"step set_input_files: {name!r:.80} is outside the upload directory"
            )
        try:
            size = os.stat(path).st_size if os.path.isfile(path) else -1
        except OSError:
            size = -1
        if not 0 <= size <= MAX_UPLOAD:
            raise BrowserError(
                f"step set_input_files: {name!r:.80} is not a file of at most {MAX_UPLOAD} bytes"
                " in the upload directory"
            )
        paths.append(path)
    return paths


async def _upload(connection: Connection, session: Session, step: Step, means: Reach) -> None:
    # Resolved here, the moment before use, and handed over resolved: a link made
    # after the check cannot redirect the path given.
    paths = upload_paths(means.upload_dir, step.files)
    found = await connection.send(
        "Runtime.evaluate", {"expression": _FILE_INPUT % json.dumps(step.text)}, session
    )
    thrown = found.get("exceptionDetails")
    if thrown is not None:
        said = thrown.get("exception", {}).get("description") or thrown.get("text", "")
        raise BrowserError(f"step set_input_files {step.text[:80]!r} failed: {str(said)[:200]}")
    target = found.get("result", {}).get("objectId")
    await connection.send("DOM.setFileInputFiles", {"files": paths, "objectId": target}, session)


async def _screenshot(connection: Connection, session: Session, *, full: bool) -> bytes:
    params: dict[str, Any] = {"format": "png"}
    if full:
        metrics = await connection.send("Page.getLayoutMetrics", {}, session)
        size = metrics.get("cssContentSize") or metrics.get("contentSize") or {}
        width = min(float(size.get("width", 800)), MAX_SHOT_HEIGHT)
        height = min(float(size.get("height", 600)), MAX_SHOT_HEIGHT)
        params["clip"] = {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}
        params["captureBeyondViewport"] = True
    shot = await connection.send("Page.captureScreenshot", params, session)
    return _bytes(shot.get("data"), "screenshot")


async def _pdf(connection: Connection, session: Session, paper: str) -> bytes:
    width, height = _PAPERS[paper]
    params = {
        "paperWidth": width,
        "paperHeight": height,
        "printBackground": True,
        "pageRanges": f"1-{MAX_PDF_PAGES}",
    }
    printed = await connection.send("Page.printToPDF", params, session)
    return _bytes(printed.get("data"), "pdf")


def _bytes(data: Any, step: str) -> bytes:
    """A capture's base64 ``data`` decoded, refused past ``MAX_CAPTURE`` before it is."""
    if not isinstance(data, str):
        raise BrowserError(f"step {step}: the browser gave no data")
    if len(data) // 4 * 3 > MAX_CAPTURE:
        raise BrowserError(f"step {step}: over {MAX_CAPTURE} bytes")
    return base64.b64decode(data)


async def _call(
    connection: Connection, session: Session, step: Step, means: Reach, act: Act
) -> Any:
    method = means.method(step.text)
    if method is None:
        raise BrowserError(
            f"step call {step.text!r:.80} names no method of the spider's own classes"
        )
    page = LivePage(connection, session, means, act)
    try:
        # In a thread: the method's page calls come back here (trio.from_thread). Past
        # the render timeout the page is closed under it; its next call fails.
        return await trio.to_thread.run_sync(method, page, abandon_on_cancel=True)
    except BrowserError:
        raise
    except Exception as exc:
        raise BrowserError(
            f"step call {step.text!r:.80} raised {type(exc).__name__}: {exc!s:.200}"
        ) from exc


class LivePage:
    """The page as a ``call`` step's method sees it: each method does one step (checked
    as a request's steps are), from the method's thread. A call cannot call."""

    def __init__(self, connection: Connection, session: Session, means: Reach, act: Act) -> None:
        self._connection, self._session, self._act = connection, session, act
        self._means = attrs.evolve(means, method=lambda name: None)

    def step(self, data: dict[str, Any]) -> Any:
        """Do one step given as data (``{"click": "button"}``); its value if it keeps one.

        Raises:
            BadStep: not a step of the list.
            BrowserError: the step failed.
        """
        step = Step.of(data)
        if step.action is Action.CALL:
            raise BrowserError("a call step's page cannot call another method")
        return trio.from_thread.run(self._act, self._connection, self._session, step, self._means)

    def evaluate(self, script: str) -> Any:
        return self.step({"evaluate": script})

    def click(self, selector: str) -> None:
        self.step({"click": selector})

    def fill(self, selector: str, value: str) -> None:
        self.step({"fill": selector, "value": value})

    def press(self, key: str, selector: str | None = None) -> None:
        self.step({"press": key, **({"selector": selector} if selector else {})})

    def wait_for(self, selector: str, timeout: float = 10.0) -> None:
        self.step({"wait_for": selector, "timeout": timeout})

    def screenshot(self, kind: str = "viewport") -> bytes:
        return bytes(self.step({"screenshot": kind}))

    @property
    def url(self) -> str:
        return str(self.evaluate("location.href"))

    def content(self) -> str:
        return str(self.evaluate("document.documentElement.outerHTML"))
