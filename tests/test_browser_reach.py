"""The steps that reach beyond the page, against the fake peer: uploads only from inside
the upload directory, captures bounded in bytes, a call only of the spider's own method,
keys pressed as key events."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from hashcrawl import BrowserError
from hashcrawl._browser._actions import act_all
from hashcrawl._browser._fake import FakeBrowser
from hashcrawl._browser._reach import MAX_CAPTURE, MAX_UPLOAD, NO_REACH, Reach, upload_paths
from hashcrawl._core._steps import BadStep, Step

Handler = Callable[[str, dict[str, Any], str | None], Any]


async def acted(handler: Handler, steps: list[dict[str, Any]], means: Reach = NO_REACH) -> Any:
    """The values of ``steps`` done against a fake browser answering with ``handler``."""
    fake = FakeBrowser(handler)
    got: list[Any] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fake.serve)
        nursery.start_soon(fake.connection.run)
        try:
            got.append(await act_all(fake.connection, "S", tuple(map(Step.of, steps)), means))
        except BrowserError as exc:  # raised here, not grouped by the nursery
            got.append(exc)
        nursery.cancel_scope.cancel()
    if isinstance(got[0], BrowserError):
        raise got[0]
    return got[0]


@pytest.fixture
def uploads(tmp_path: Path) -> Path:
    """An upload directory holding ``cv.txt``, beside a secret outside it."""
    inside = tmp_path / "up"
    inside.mkdir()
    (inside / "cv.txt").write_text("cv")
    (tmp_path / "secret").write_text("secret")
    return inside


def test_an_upload_resolves_inside_the_directory(uploads: Path) -> None:
    """A file in the directory is handed over by its real path."""
    assert upload_paths(str(uploads), ("cv.txt",)) == [str((uploads / "cv.txt").resolve())]


@pytest.mark.parametrize(
    ("make", "name", "said"),
    [
        (lambda d: os.symlink(d.parent / "secret", d / "link"), "link", "outside the upload"),
        (lambda d: os.symlink(d.parent, d / "up"), "up/secret", "outside the upload"),
        (lambda d: os.symlink("/etc/passwd", d / "pw"), "pw", "outside the upload"),
        (lambda d: (d / "sub").mkdir(), "sub", "not a file"),
        (lambda d: None, "missing.txt", "not a file"),
        (lambda d: os.mkfifo(d / "fifo"), "fifo", "not a file"),
        (lambda d: os.truncate(d / "cv.txt", MAX_UPLOAD + 1), "cv.txt", "not a file of at most"),
    ],
)
def test_an_upload_that_escapes_by_a_link_or_is_no_small_file_is_refused(
    uploads: Path, make: Callable[[Path], Any], name: str, said: str
) -> None:
    """A symbolic link out of the directory, a directory, a missing file, a FIFO (whose
    read would block) or a file over the cap: refused, naming the path and the rule."""
    make(uploads)
    with pytest.raises(BrowserError, match=said):
        upload_paths(str(uploads), (name,))


async def test_an_upload_without_a_directory_fails_before_the_browser_is_asked() -> None:
    """No --browser-upload-dir: the step fails, and nothing is sent to the browser."""
    sent: list[str] = []

    def handler(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
        sent.append(method)
        return {}

    with pytest.raises(BrowserError, match="needs --browser-upload-dir"):
        await acted(handler, [{"set_input_files": "#f", "files": ["cv.txt"]}])
    assert sent == []


async def test_an_upload_hands_the_resolved_path_to_the_file_input(uploads: Path) -> None:
    """The file input found by its selector gets the file's real path."""
    sent: list[tuple[str, dict[str, Any]]] = []

    def handler(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
        sent.append((method, params))
        return {"result": {"objectId": "O1"}} if method == "Runtime.evaluate" else {}

    step = {"set_input_files": "#f", "files": ["cv.txt"]}
    await acted(handler, [step], Reach(upload_dir=str(uploads)))
    assert sent[-1] == (
        "DOM.setFileInputFiles",
        {"files": [str((uploads / "cv.txt").resolve())], "objectId": "O1"},
    )


async def test_captures_give_their_bytes_and_a_capture_over_the_cap_fails() -> None:
    """Screenshot and PDF bytes are kept in order; data past MAX_CAPTURE is refused
    before it is decoded."""
    size = {"n": 3}

    def handler(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
        if method == "Page.getLayoutMetrics":
            return {"cssContentSize": {"width": 800, "height": 10**9}}
        return {"data": base64.b64encode(method.encode()[: size["n"]]).decode()}

    kept = await acted(handler, [{"screenshot": "viewport"}, {"click": "a"}, {"pdf": "a4"}])
    assert kept == (b"Pag", b"Pag")
    size["n"] = 10**9

    def huge(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
        return {"data": "A" * (MAX_CAPTURE // 3 * 4 + 8)}

    with pytest.raises(BrowserError, match=f"step pdf: over {MAX_CAPTURE} bytes"):
        await acted(huge, [{"pdf": "letter"}])


async def test_a_full_screenshot_of_an_endless_page_is_cut_at_the_height_cap() -> None:
    """A page that claims to be a billion pixels high is captured 16,384 high at most."""
    clips: list[dict[str, Any]] = []

    def handler(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
        if method == "Page.getLayoutMetrics":
            return {"cssContentSize": {"width": 800, "height": 10**9}}
        clips.append(params["clip"])
        return {"data": ""}

    await acted(handler, [{"screenshot": "full"}])
    assert clips[0]["height"] == 16_384


async def test_a_pdf_is_limited_to_its_first_hundred_pages() -> None:
    """printToPDF is asked for pages 1-100 only."""
    asked: list[dict[str, Any]] = []

    def handler(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
        asked.append(params)
        return {"data": ""}

    await acted(handler, [{"pdf": "a4"}])
    assert asked[0]["pageRanges"] == "1-100"


def evaluating(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
    return {"result": {"value": params.get("expression", method)}}


async def test_a_call_gives_the_spiders_method_the_live_page_and_keeps_its_value() -> None:
    """The method's page steps go to the tab (a fill as a JSON literal); its return is kept."""

    def log_in(page: Any) -> str:
        page.fill("#user", 'me"); steal("')
        return "logged in as " + str(page.evaluate("'me'"))

    means = Reach(method=lambda name: log_in if name == "log_in" else None)
    kept = await acted(evaluating, [{"call": "log_in"}], means)
    assert kept == ("logged in as 'me'",)


@pytest.mark.parametrize(
    ("method", "said"),
    [
        (None, "names no method of the spider's own classes"),
        (lambda page: page.step({"call": "log_in"}), "cannot call another method"),
        (lambda page: page.step({"steal": 1}), "raised BadStep"),
        (lambda page: 1 / 0, "raised ZeroDivisionError"),
    ],
)
async def test_a_call_of_no_method_a_nested_call_or_a_raising_method_fails_the_page(
    method: Any, said: str
) -> None:
    """Each is a BrowserError naming the step (the page's fetch fails; the worker lives)."""
    means = Reach(method=lambda name: method)
    with pytest.raises(BrowserError, match=said):
        await acted(evaluating, [{"call": "log_in"}], means)


async def test_a_press_sends_a_key_down_and_up_on_the_focused_selector() -> None:
    """Enter types a carriage return; the selector is focused first, as a literal."""
    sent: list[tuple[str, dict[str, Any]]] = []

    def handler(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
        sent.append((method, params))
        return {"result": {"value": True}}

    await acted(handler, [{"press": "Enter", "selector": "#q"}, {"press": "x"}])
    assert [m for m, _ in sent] == ["Runtime.evaluate", *["Input.dispatchKeyEvent"] * 4]
    assert '"#q"' in sent[0][1]["expression"]
    assert sent[1][1] == {
        "type": "keyDown", "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13,
        "text": "\r",
    }  # fmt: skip
    assert sent[3][1]["text"] == "x" and sent[3][1]["code"] == "KeyX"


async def test_a_live_page_refuses_a_step_outside_the_list_before_sending_it() -> None:
    """A method's own step data is checked as the queue's is."""
    with pytest.raises(BadStep):
        Step.of({"press": "NotAKey"})
    sent: list[str] = []

    def handler(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
        sent.append(method)
        return {}

    means = Reach(method=lambda name: lambda page: page.press("F99"))
    with pytest.raises(BrowserError, match="raised BadStep"):
        await acted(handler, [{"call": "m"}], means)
    assert sent == []
