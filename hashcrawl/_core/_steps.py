"""A rendered request's steps: data from a closed list, checked when made and when read.

A step is one JSON object with one action key and its options::

    {"wait_for": "li.item:nth-child(20)", "timeout": 10}   a CSS selector to appear
    {"click": "button.more"}                               click the first match
    {"scroll": "end", "times": 3}                          scroll to the end N times
    {"wait": 0.5}                                          seconds
    {"evaluate": "document.title"}                         a script; its value is kept
    {"fill": "input[name=q]", "value": "shoes"}            type text into a field
    {"press": "Enter", "selector": "input[name=q]"}        a key (on the focused element
                                                           without a selector)
    {"set_input_files": "input[type=file]", "files": ["cv.pdf"]}
                                                           files from --browser-upload-dir
    {"screenshot": "viewport"}                             PNG bytes kept ("full": the
                                                           whole page, its height capped)
    {"pdf": "a4"}                                          PDF bytes kept ("a4", "letter")
    {"call": "log_in"}                                     a method of the spider's own
                                                           classes, given the live page

The kept values (evaluate's, screenshot's and pdf's bytes, call's return) are the
response's ``render.results``, in order. Where a step may reach beyond the page, the
owner checks it again before the page is fetched (:func:`steps_refusal`): a ``call`` must
name a method of the spider's own classes, a ``set_input_files`` needs an upload
directory; the path itself is resolved inside that directory when the step is done.

Steps travel through Redis in the request's entry and are checked again when read back:
a step that is not one of these, or out of its bounds, is a :class:`BadStep`; an entry
holding one keeps it as it was (``Entry.unread_steps``), and its owner dead-letters it
with the reason (``Entry.steps_refusal``).
"""

from __future__ import annotations

import enum
import fnmatch
import functools
import re
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from hashcrawl._exceptions import ConfigError

MAX_STEPS = 50  # the most steps one request may carry
MAX_TEXT = 4096  # the longest selector or script
MAX_SECONDS = 60.0  # the longest wait, or wait_for timeout
MAX_TIMES = 100  # the most scrolls one step makes
MAX_FILES = 10  # the most files one set_input_files step uploads
DEFAULT_WAIT_FOR = 10.0
#: The keys a press step may name besides one printable character.
KEYS = frozenset(
    {
        *("Enter", "Tab", "Escape", "Backspace", "Delete", "Space", "Home", "End"),
        *("ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "PageUp", "PageDown"),
    }
)
SHOTS = ("viewport", "full")
PAPERS = ("a4", "letter")


class BadStep(ConfigError):
    """A step not from the closed list, or out of its bounds."""


class Action(enum.Enum):
    """What a step does."""

    WAIT_FOR = "wait_for"
    CLICK = "click"
    SCROLL = "scroll"
    WAIT = "wait"
    EVALUATE = "evaluate"
    FILL = "fill"
    PRESS = "press"
    SET_INPUT_FILES = "set_input_files"
    SCREENSHOT = "screenshot"
    PDF = "pdf"
    CALL = "call"


#: The actions whose value is kept in ``response.render.results``.
KEPT = frozenset({Action.EVALUATE, Action.SCREENSHOT, Action.PDF, Action.CALL})

#: Each action's options besides its own key.
_OPTIONS = {
    Action.WAIT_FOR: {"timeout"},
    Action.CLICK: set(),
    Action.SCROLL: {"times"},
    Action.WAIT: set(),
    Action.EVALUATE: set(),
    Action.FILL: {"value"},
    Action.PRESS: {"selector"},
    Action.SET_INPUT_FILES: {"files"},
    Action.SCREENSHOT: set(),
    Action.PDF: set(),
    Action.CALL: set(),
}


@attrs.frozen(kw_only=True)
class Step:
    """One step: its action, the selector or script it acts on, seconds and times."""

    action: Action
    # The selector (wait_for, click, fill, press, set_input_files), the script
    # (evaluate), the kind (screenshot, pdf) or the method's name (call).
    text: str = ""
    seconds: float = 0.0  # wait's length, or wait_for's timeout
    times: int = 1  # scroll's count
    value: str = ""  # fill's text, or press's key
    files: tuple[str, ...] = ()  # set_input_files' paths, inside the upload directory

    @classmethod
    def of(cls, data: Any) -> Step:
        """The step ``data`` describes (a Step is returned as it is).

        Raises:
            BadStep: ``data`` is not a step from the closed list, within its bounds.
        """
        if isinstance(data, Step):
            return data
        if not isinstance(data, dict):
            raise BadStep(f"a step is an object such as {{'click': 'button'}}, not {_clip(data)}")
        actions = [Action(key) for key in data if key in Action._value2member_map_]
        if len(actions) != 1:
            names = ", ".join(a.value for a in Action)
            raise BadStep(f"a step names exactly one action of {names}: {_clip(data)}")
        action = actions[0]
        unknown = set(data) - {action.value} - _OPTIONS[action]
        if unknown:
            raise BadStep(
                f"step {action.value} has unknown options {sorted(unknown)}: {_clip(data)}"
            )
        return _BUILDERS[action](data[action.value], data)

    def to_data(self) -> dict[str, Any]:
        """The step as JSON data (what :meth:`of` reads back)."""
        if self.action is Action.WAIT:
            return {"wait": self.seconds}
        if self.action is Action.SCROLL:
            return {"scroll": "end", "times": self.times}
        if self.action is Action.WAIT_FOR:
            return {"wait_for": self.text, "timeout": self.seconds}
        if self.action is Action.FILL:
            return {"fill": self.text, "value": self.value}
        if self.action is Action.PRESS:
            return {"press": self.value, **({"selector": self.text} if self.text else {})}
        if self.action is Action.SET_INPUT_FILES:
            return {"set_input_files": self.text, "files": list(self.files)}
        return {self.action.value: self.text}


@attrs.frozen(kw_only=True)
class Rendered:
    """What a rendered page's fetch adds to its response (``response.render``).

    ``results`` are the values of the evaluate and call steps and the bytes of the
    screenshot (PNG) and pdf steps, in order; ``requests`` are the
    URLs the page asked for and what became of each (fetched, refused and why);
    ``archived`` are the responses to the page's own requests that hold their exchange
    as it went over the wire (kept only when the worker archives), for the WARC.
    """

    results: tuple[Any, ...] = ()
    requests: tuple[tuple[str, str], ...] = ()
    archived: tuple[Any, ...] = attrs.field(default=(), eq=False, repr=False)


def steps_of(value: Iterable[Any] | None) -> tuple[Step, ...]:
    """Steps from a list of step objects (or :class:`Step` values).

    Raises:
        BadStep: not a list, more than ``MAX_STEPS``, or a step that is not one.
    """
    if value is None:
        return ()
    if isinstance(value, str | bytes | dict) or not isinstance(value, Iterable):
        raise BadStep(f"steps are a list of step objects, not {_clip(value)}")
    steps = tuple(Step.of(item) for item in value)
    if len(steps) > MAX_STEPS:
        raise BadStep(f"a request carries at most {MAX_STEPS} steps, not {len(steps)}")
    return steps


def steps_refusal(
    steps: Iterable[Step], *, methods: Callable[[str], bool], uploads: bool
) -> str | None:
    """Why an owner may not do ``steps`` read from the queue, or None: a call naming
    what ``methods`` says is not a method of the spider's own classes, or an upload
    when there is no upload directory (``uploads`` False)."""
    for step in steps:
        if step.action is Action.CALL and not methods(step.text):
            return f"step call {step.text!r:.80} names no method of the spider's own classes"
        if step.action is Action.SET_INPUT_FILES and not uploads:
            return "step set_input_files needs --browser-upload-dir, which this worker lacks"
    return None


MAX_HOST_PATTERNS = 100  # the most patterns --render-hosts holds
_PATTERN = re.compile(r"[a-z0-9*?.\-\[\]:]{1,253}")


@functools.lru_cache(maxsize=16)  # asked for every page; the setting rarely changes
def host_patterns(text: str | None) -> tuple[str, ...]:
    """The host patterns of ``--render-hosts`` (comma-separated globs, ``*.shop.test``).

    Raises:
        ConfigError: an empty pattern, one with other characters than a host's and
            ``*?[]``, or more than ``MAX_HOST_PATTERNS``.
    """
    if text is None:
        return ()
    patterns = tuple(part.strip().lower() for part in text.split(","))
    if len(patterns) > MAX_HOST_PATTERNS:
        raise ConfigError(f"--render-hosts holds at most {MAX_HOST_PATTERNS} patterns")
    for pattern in patterns:
        if not _PATTERN.fullmatch(pattern):
            raise ConfigError(
                "--render-hosts must be comma-separated host patterns such as '*.shop.test'"
                f" (letters, digits, '.-:' and '*?[]'), got {_clip(pattern)}"
            )
    return patterns


def renders(host: str, *, render: bool, hosts: str | None) -> bool:
    """Whether a page of ``host`` is rendered by the crawl's settings (``--render``,
    ``--render-hosts``), whatever its request asks."""
    if render:
        return True
    return any(fnmatch.fnmatchcase(host.lower(), pattern) for pattern in host_patterns(hosts))


def _text(value: Any, data: Any) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_TEXT:
        raise BadStep(
            f"a step's selector or script is text of 1 to {MAX_TEXT} characters: {_clip(data)}"
        )
    return value


def _seconds(value: Any, data: Any) -> float:
    if type(value) not in (int, float) or not 0 <= value <= MAX_SECONDS:
        raise BadStep(f"a step's seconds are a number in [0, {MAX_SECONDS:g}]: {_clip(data)}")
    return float(value)


def _scroll(value: Any, data: dict[str, Any]) -> Step:
    times = data.get("times", 1)
    if value != "end":
        raise BadStep(f"scroll goes to the 'end': {_clip(data)}")
    if type(times) is not int or not 1 <= times <= MAX_TIMES:
        raise BadStep(f"scroll's times are an integer in [1, {MAX_TIMES}]: {_clip(data)}")
    return Step(action=Action.SCROLL, times=times)


def _wait_for(value: Any, data: dict[str, Any]) -> Step:
    timeout = _seconds(data.get("timeout", DEFAULT_WAIT_FOR), data)
    return Step(action=Action.WAIT_FOR, text=_text(value, data), seconds=timeout)


def _click(value: Any, data: dict[str, Any]) -> Step:
    return Step(action=Action.CLICK, text=_text(value, data))


def _wait(value: Any, data: dict[str, Any]) -> Step:
    return Step(action=Action.WAIT, seconds=_seconds(value, data))


def _evaluate(value: Any, data: dict[str, Any]) -> Step:
    return Step(action=Action.EVALUATE, text=_text(value, data))


def _fill(value: Any, data: dict[str, Any]) -> Step:
    typed = data.get("value")
    if not isinstance(typed, str) or len(typed) > MAX_TEXT:
        raise BadStep(f"fill's value is text of at most {MAX_TEXT} characters: {_clip(data)}")
    return Step(action=Action.FILL, text=_text(value, data), value=typed)


def _press(value: Any, data: dict[str, Any]) -> Step:
    printable = isinstance(value, str) and len(value) == 1 and value.isprintable()
    if not (printable or value in KEYS):
        raise BadStep(f"press names one character or a key of {sorted(KEYS)}: {_clip(data)}")
    selector = _text(data["selector"], data) if "selector" in data else ""
    return Step(action=Action.PRESS, text=selector, value=value)


def _set_input_files(value: Any, data: dict[str, Any]) -> Step:
    files = data.get("files")
    if not isinstance(files, list) or not 1 <= len(files) <= MAX_FILES:
        raise BadStep(f"set_input_files' files are a list of 1 to {MAX_FILES} paths: {_clip(data)}")
    for name in files:
        if not isinstance(name, str) or not _relative_path(name):
            raise BadStep(
                "set_input_files' files are paths inside the upload directory (relative,"
                f" no '..'): {_clip(data)}"
            )
    return Step(action=Action.SET_INPUT_FILES, text=_text(value, data), files=tuple(files))


def _relative_path(name: str) -> bool:
    parts = name.split("/")
    return (
        0 < len(name) <= 255
        and "\0" not in name
        and not name.startswith("/")
        and all(part not in ("", ".", "..") for part in parts)
    )


def _one_of(kinds: tuple[str, ...], action: Action) -> Callable[[Any, dict[str, Any]], Step]:
    def build(value: Any, data: dict[str, Any]) -> Step:
        if value not in kinds:
            raise BadStep(f"{action.value} is one of {list(kinds)}: {_clip(data)}")
        return Step(action=action, text=value)

    return build


def _call(value: Any, data: dict[str, Any]) -> Step:
    if not (isinstance(value, str) and value.isidentifier() and not value.startswith("_")):
        raise BadStep(f"call names a public method (an identifier, no '_' first): {_clip(data)}")
    return Step(action=Action.CALL, text=_text(value, data))


_BUILDERS: dict[Action, Callable[[Any, dict[str, Any]], Step]] = {
    Action.WAIT_FOR: _wait_for,
    Action.CLICK: _click,
    Action.SCROLL: _scroll,
    Action.WAIT: _wait,
    Action.EVALUATE: _evaluate,
    Action.FILL: _fill,
    Action.PRESS: _press,
    Action.SET_INPUT_FILES: _set_input_files,
    Action.SCREENSHOT: _one_of(SHOTS, Action.SCREENSHOT),
    Action.PDF: _one_of(PAPERS, Action.PDF),
    Action.CALL: _call,
}


def _clip(data: Any) -> str:
    text = repr(data)
    return text if len(text) <= 120 else text[:117] + "..."
