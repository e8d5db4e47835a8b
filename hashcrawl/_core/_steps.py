"""A rendered request's steps: data from a closed list, checked when made and when read.

A step is one JSON object with one action key and its options::

    {"wait_for": "li.item:nth-child(20)", "timeout": 10}   a CSS selector to appear
    {"click": "button.more"}                               click the first match
    {"scroll": "end", "times": 3}                          scroll to the end N times
    {"wait": 0.5}                                          seconds
    {"evaluate": "document.title"}                         a script; its value is kept

Steps travel through Redis in the request's entry and are checked again when read back:
a step that is not one of these, or out of its bounds, is a :class:`BadStep`; an entry
holding one keeps it as it was (``Entry.unread_steps``), and its owner dead-letters it
with the reason (``Entry.steps_refusal``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from hashcrawl._exceptions import ConfigError

MAX_STEPS = 50  # the most steps one request may carry
MAX_TEXT = 4096  # the longest selector or script
MAX_SECONDS = 60.0  # the longest wait, or wait_for timeout
MAX_TIMES = 100  # the most scrolls one step makes
DEFAULT_WAIT_FOR = 10.0


class BadStep(ConfigError):
    """A step not from the closed list, or out of its bounds."""


class Action(enum.Enum):
    """What a step does."""

    WAIT_FOR = "wait_for"
    CLICK = "click"
    SCROLL = "scroll"
    WAIT = "wait"
    EVALUATE = "evaluate"


#: Each action's options besides its own key.
_OPTIONS = {
    Action.WAIT_FOR: {"timeout"},
    Action.CLICK: set(),
    Action.SCROLL: {"times"},
    Action.WAIT: set(),
    Action.EVALUATE: set(),
}


@attrs.frozen(kw_only=True)
class Step:
    """One step: its action, the selector or script it acts on, seconds and times."""

    action: Action
    text: str = ""  # the selector (wait_for, click) or the script (evaluate)
    seconds: float = 0.0  # wait's length, or wait_for's timeout
    times: int = 1  # scroll's count

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
        return {self.action.value: self.text}


@attrs.frozen(kw_only=True)
class Rendered:
    """What a rendered page's fetch adds to its response (``response.render``).

    ``results`` are the values of the evaluate steps, in order; ``requests`` are the
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


_BUILDERS: dict[Action, Callable[[Any, dict[str, Any]], Step]] = {
    Action.WAIT_FOR: _wait_for,
    Action.CLICK: _click,
    Action.SCROLL: _scroll,
    Action.WAIT: _wait,
    Action.EVALUATE: _evaluate,
}


def _clip(data: Any) -> str:
    text = repr(data)
    return text if len(text) <= 120 else text[:117] + "..."
