"""A crawl's settings, kept with the crawl: one value of each crawl setting, fleet-wide.

The crawl settings are the fields of :class:`Settings` whose flag says ``crawl``
(``_settings.CRAWL``). The scope's two (``allow_domains``, ``span_hosts``) live in the
``scope`` set, which only grows and whose size every commit checks (``_scope``); every
other lives in the ``settings`` hash, one field each, as the text its flag takes, with a
``version`` that rises by one on every change (the keys: ``_store``).

- The first command that runs a worker or changes a setting (``join``, ``crawl``,
  ``configure``) records them all, defaults included (:func:`adopt`, :func:`change`).
- A worker takes the crawl's. One given a crawl setting that differs is refused with one
  line naming the flag, both values and the command that changes it (:func:`adopt`).
- ``hashcrawl configure`` changes them atomically (:func:`change`). Every heartbeat
  reply carries the version; a worker that sees a new one reads and applies the
  settings (the driver's ``settings_loop``). A ``fixed`` setting changes only while no
  worker is a member.
- What is stored is input from outside: each text is parsed by its flag's parser, and
  the whole checked by :class:`Settings`' own checks. A bad record is named in one line
  (:class:`ConfigError`), never a crash.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from hashcrawl._core._flags import NONE, Flag, flag_name
from hashcrawl._core._scope import members as scope_members
from hashcrawl._core._settings import CRAWL, Settings
from hashcrawl._exceptions import ConfigError

if TYPE_CHECKING:
    from hashcrawl._core._batch import Beat
    from hashcrawl._store._base import StatusStore, WorkerStore
    from hashcrawl._store._redisurl import RedisURL
    from hashcrawl._store._store import Store

log = logging.getLogger("hashcrawl")
SCOPE = ("allow_domains", "span_hosts")  # in the scope set, not the settings hash
MAX_TEXT = 10_000  # the longest stored text read back: a user agent is at most 8 KiB
TOO_LONG = "\0big"  # lua/settings.lua's stand-in for a text longer than MAX_TEXT
CHANGE_TRIES = 20  # configure reads again when another change got in first


def _field(name: str) -> attrs.Attribute[Any]:
    field: attrs.Attribute[Any] = getattr(attrs.fields(Settings), name)
    return field


def _flag(name: str) -> Flag:
    flag: Flag = _field(name).metadata["flag"]
    return flag


RECORDED = tuple(name for name in CRAWL if name not in SCOPE)
FIXED = tuple(name for name in CRAWL if _flag(name).fixed)


def to_text(name: str, value: Any) -> str:
    """A setting's value as stored: the text its flag takes ('true'/'false' for a switch)."""
    if _flag(name).parse is None:
        return "true" if value else "false"
    return NONE if value is None else str(value)


def from_text(name: str, text: str | None) -> Any:
    """A stored setting's value, parsed as its flag's text is.

    Raises:
        ConfigError: missing, or not what the flag takes; names the flag.
    """
    flag, shown = _flag(name), flag_name(_field(name))
    if text is None:
        raise ConfigError(f"{shown} is missing")
    if text == TOO_LONG:
        raise ConfigError(f"{shown} is longer than {MAX_TEXT} characters")
    if flag.parse is None:
        if text not in ("true", "false"):
            raise ConfigError(f"{shown}: expected true or false, got {text[:100]!r}")
        return text == "true"
    try:
        return flag.parse(text)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"{shown}: {str(exc)[:200]}") from None


def _version(text: str | None) -> int:
    if text is None or not text.isdigit() or len(text) > 15:
        raise ConfigError(f"its version must be a whole number, got {str(text)[:40]!r}")
    return int(text)


@attrs.frozen(kw_only=True)
class CrawlSettings:
    """The crawl's recorded settings (the scope's aside) at one version."""

    crawl: str
    version: int
    values: Mapping[str, Any]

    @classmethod
    def from_texts(
        cls, crawl: str, version: str | None, texts: Sequence[str | None]
    ) -> CrawlSettings:
        """The settings a record holds, every value checked as its flag's would be.

        Raises:
            ConfigError: one line naming the crawl, the bad value and how to mend it.
        """
        values, mend = {}, f"set them with {_configure(crawl)}"
        try:
            for name, text in zip(RECORDED, texts, strict=True):
                values[name] = from_text(name, text)
            Settings.of(values)  # the checks of each field, and of fields together
            mend = f"set one with {_configure(crawl)} (any change mends it)"
            number = _version(version)
        except ConfigError as exc:
            if len(values) < len(RECORDED):
                mend = f"set it with {_configure(crawl)} {_example(RECORDED[len(values)])}"
            raise ConfigError(
                f"{_whose(crawl)} settings in Redis are not usable: {exc}; {mend} "
                "(or delete the crawl: hashcrawl clear)"
            ) from None
        return cls(crawl=crawl, version=number, values=values)

    def given_to(self, settings: Settings) -> Settings:
        """``settings`` with the crawl's values in place of the worker's."""
        return attrs.evolve(settings, **self.values)

    def changes_from(self, old: CrawlSettings) -> list[str]:
        """What differs from ``old``, as ``--flag: new (was old)`` each."""
        return _change_lines(self.values, old.values)


def _whose(crawl: str) -> str:
    return f"crawl {crawl}'s"  # a crawl's name is checked: no quotes needed


def _configure(crawl: str) -> str:
    return "hashcrawl configure" + ("" if crawl == "default" else f" --crawl {crawl}")


def _example(name: str) -> str:
    """A flag as configure takes it: ``--delay S``, or a switch's ``--reset``."""
    flag, shown = _flag(name), flag_name(_field(name))
    if flag.parse is None:
        return f"{shown} (or --reset {shown.removeprefix('--')})"
    return f"{shown} {flag.metavar}"


def _parsed(crawl: str, reply: Sequence[Any]) -> tuple[CrawlSettings, bool, list[int]]:
    """(settings, created, scope membership) from ``lua/settings.lua``'s reply.

    Raises:
        ConfigError: the record is not usable.
    """
    texts = reply[3 : 3 + len(RECORDED)]
    found = CrawlSettings.from_texts(crawl, reply[2], texts)
    return found, bool(int(reply[1])), [int(x) for x in reply[3 + len(RECORDED) :]]


# -- a worker starts -----------------------------------------------------------------------


def adopt(
    store: Store, settings: Settings, given: Mapping[str, Any]
) -> tuple[Settings, CrawlSettings]:
    """The crawl's settings, with ``settings`` recorded as them if the crawl has none yet.

    Args:
        given: the crawl settings the worker was given (a flag, or a keyword); any
            other crawl setting of ``settings`` is a default, recorded but never refused.

    Returns:
        ``settings`` with the crawl's values, and the crawl's settings.

    Raises:
        ConfigError: a given setting differs from the crawl's (one line naming the flag,
            both values and the configure command), or the stored record is bad.
    """
    texts = {name: to_text(name, getattr(settings, name)) for name in RECORDED}
    scope = _scope_of(given)
    reply = store.start_settings(texts, scope, max_text=MAX_TEXT)
    crawl, created, in_scope = _parsed(store.crawl, reply)
    if not created:
        problem = _disagreement(crawl, given) or _outside_scope(crawl.crawl, given, in_scope)
        if problem:
            raise ConfigError(problem)
    return crawl.given_to(settings), crawl


def adopt_at(
    url: RedisURL, crawl: str, settings: Settings, given: Mapping[str, Any]
) -> tuple[Settings, CrawlSettings]:
    """:func:`adopt` on the crawl ``crawl`` at ``url``, over a connection of its own."""
    from hashcrawl._store._store import Store

    store = Store(url, crawl, timeout=settings.answer_timeout)
    try:
        return adopt(store, settings, given)
    finally:
        store.close()


def _scope_of(given: Mapping[str, Any]) -> list[str]:
    """The scope members ``given`` asks for, in a stable order (see :func:`_outside_scope`)."""
    one = [scope_members(domains=[d]).pop() for d in given.get("allow_domains", ())]
    return one + sorted(scope_members(span=bool(given.get("span_hosts"))))


def _disagreement(crawl: CrawlSettings, given: Mapping[str, Any]) -> str | None:
    for name in RECORDED:
        if name in given and given[name] != crawl.values[name]:
            mine, theirs = _shown(name, given[name]), _shown(name, crawl.values[name])
            return (
                f"{mine} disagrees with {_whose(crawl.crawl)} {theirs}: leave the flag out "
                f"to take the crawl's, or change it for every worker with "
                f"{_configure(crawl.crawl)} {_as_flag(name, given[name])}"
            )
    return None


def _outside_scope(crawl: str, given: Mapping[str, Any], in_scope: list[int]) -> str | None:
    asked = [*(f"--allow-domain {d}" for d in given.get("allow_domains", ()))]
    asked += ["--span-hosts"] if given.get("span_hosts") else []
    missing = [flag for flag, there in zip(asked, in_scope, strict=True) if not there]
    if not missing:
        return None
    return (
        f"{missing[0]} is not in {_whose(crawl)} scope: leave the flag out to take the "
        f"crawl's, or widen it for every worker with {_configure(crawl)} {missing[0]}"
    )


def _shown(name: str, value: Any) -> str:
    """``--delay 2.0``; a switch as ``--ignore-robots`` or ``no --ignore-robots``."""
    shown = flag_name(_field(name))
    if _flag(name).parse is None:
        return shown if value != _field(name).default else f"no {shown}"
    return f"{shown} {to_text(name, value)}"


def _as_flag(name: str, value: Any) -> str:
    """The configure arguments that set ``name`` to ``value``."""
    if _flag(name).parse is None and value == _field(name).default:
        return f"--reset {flag_name(_field(name)).removeprefix('--')}"
    return _shown(name, value)


# -- configure -------------------------------------------------------------------------------


def change(
    store: Store, given: Mapping[str, Any], *, reset: Sequence[str] = ()
) -> tuple[CrawlSettings, list[str]]:
    """Change the crawl's settings to ``given`` (and ``reset`` ones to their defaults),
    atomically, at a new version; the first change records every other setting too.

    Returns:
        The settings now, and the changes made (``--flag: new (was old)`` each).

    Raises:
        ConfigError: a value out of range (alone, or with the crawl's other settings),
            a fixed setting while workers are members, or a bad record left as it is.
    """
    wanted = {**{n: _field(n).default for n in reset}, **given}
    for _ in range(CHANGE_TRIES):
        reply = store.read_settings(RECORDED, max_text=MAX_TEXT)
        version = "" if reply[2] is None else str(reply[2])
        stored = dict(zip(RECORDED, reply[3 : 3 + len(RECORDED)], strict=True))
        after = _changed(store.crawl, stored, wanted)
        texts = {n: to_text(n, v) for n, v in after.items() if to_text(n, v) != stored[n]}
        needs_empty = version != "" and any(n in FIXED for n in texts)
        scope = _scope_of(wanted)
        done = store.change_settings(texts, scope, expected=version, needs_empty=needs_empty)
        if done[0] == "busy":
            raise ConfigError(_busy(store.crawl, texts, int(done[1])))
        if done[0] == "ok":
            now, _, _ = _parsed(store.crawl, store.read_settings(RECORDED, max_text=MAX_TEXT))
            return now, _change_lines(now.values, _as_stored(stored))
    raise ConfigError(f"{_whose(store.crawl)} settings kept changing meanwhile; try again")


def _changed(
    crawl: str, stored: Mapping[str, str | None], wanted: Mapping[str, Any]
) -> dict[str, Any]:
    """The recorded settings after the change, checked as a whole.

    A stored value the change replaces may be bad: that is how a bad record is mended.

    Raises:
        ConfigError: a value kept is bad, or the values do not fit together.
    """
    values = {}
    for name in RECORDED:
        if name in wanted:
            values[name] = wanted[name]
        elif stored[name] is None:
            values[name] = _field(name).default
        else:
            try:
                values[name] = from_text(name, stored[name])
            except ConfigError as exc:
                raise ConfigError(
                    f"{_whose(crawl)} settings in Redis are not usable: {exc}; give "
                    f"{flag_name(_field(name))} a value too (or delete the crawl: hashcrawl clear)"
                ) from None
    Settings.of(values)
    return values


def _as_stored(stored: Mapping[str, str | None]) -> dict[str, Any]:
    """The stored values, defaults for missing ones and None for those not usable."""
    values: dict[str, Any] = {}
    for name, text in stored.items():
        try:
            values[name] = _field(name).default if text is None else from_text(name, text)
        except ConfigError:
            values[name] = _UNUSABLE
    return values


_UNUSABLE = object()


def _change_lines(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[str]:
    """``--flag: new (was old)`` for each setting that differs."""
    return [
        f"{flag_name(_field(n))}: {_value_text(n, new[n])} (was {_value_text(n, old[n])})"
        for n in RECORDED
        if new[n] != old[n]
    ]


def _busy(crawl: str, texts: Mapping[str, str], members: int) -> str:
    fixed = ", ".join(flag_name(_field(n)) for n in texts if n in FIXED)
    return (
        f"{fixed} of {crawl!r} can change only while no worker is a member ({members} "
        f"{'is' if members == 1 else 'are'}: stop them first; a dead one leaves after its lease)"
    )


# -- a running worker ---------------------------------------------------------------------


def newer(known: CrawlSettings | None, beat: Beat) -> bool:
    """Whether ``beat`` names a version of the crawl's settings other than ``known``
    (None: a membership driven without ``Worker.run``, as the simulations do)."""
    return known is not None and beat.settings != str(known.version)


def read_running(store: WorkerStore, settings: Settings) -> CrawlSettings:
    """The crawl's settings as a running worker reads them (recording ``settings``' if
    none are recorded).

    Raises:
        ConfigError: the stored settings are not usable; names the flag.
    """
    texts = {name: to_text(name, getattr(settings, name)) for name in RECORDED}
    reply = store.start_settings(texts, [], max_text=MAX_TEXT)
    return _parsed(store.crawl, reply)[0]


def updated(
    crawl: str, old: CrawlSettings | None, new: CrawlSettings, settings: Settings
) -> Settings | None:
    """The settings a worker running with ``settings`` (from ``old``) takes on at once
    for ``new``; None if nothing changed. A host's next request is paced by the new delay.

    Raises:
        ConfigError: a fixed setting changed (this worker was started before it), or
            the new values do not fit this worker's own settings.
    """
    if old is None or new.version == old.version:
        return None
    moved = [flag_name(_field(n)) for n in FIXED if new.values[n] != old.values[n]]
    if moved:
        raise ConfigError(
            f"{_whose(crawl)} {', '.join(moved)} changed while this worker ran "
            "(workers take it when they start); start it again"
        )
    taken = new.given_to(settings)
    changes = new.changes_from(old)
    log.warning(
        "%s settings are at version %d%s",
        _whose(crawl),
        new.version,
        ": " + ", ".join(changes) if changes else "",
    )
    return taken


# -- status ------------------------------------------------------------------------------------


def view(store: StatusStore) -> dict[str, Any]:
    """The crawl's settings for ``hashcrawl status``: by field name, and ``version``
    (None when none are recorded); ``error`` instead of values when they are unusable."""
    domains, span = store.scope_domains()
    scope = {"allow_domains": domains, "span_hosts": span}
    reply = store.read_settings(RECORDED, max_text=MAX_TEXT)
    if reply[2] is None:
        return {"version": None, **scope}
    try:
        found, _, _ = _parsed(store.crawl, reply)
    except ConfigError as exc:
        return {"version": None, "error": str(exc), **scope}
    return {"version": found.version, **found.values, **scope}


def view_lines(shown: Mapping[str, Any]) -> list[str]:
    """:func:`view` as ``status`` prints it: a heading, then one line per flag."""
    if shown.get("error"):
        return [f"settings: {shown['error']}"]
    if shown["version"] is None:
        head = "settings: none recorded yet (the first worker records its own)"
        return [head, *_scope_lines(shown)]
    lines = [f"settings: version {shown['version']} (hashcrawl configure changes them)"]
    lines += [f"  {flag_name(_field(n))}: {_value_text(n, shown[n])}" for n in RECORDED]
    return lines + _scope_lines(shown)


def _scope_lines(shown: Mapping[str, Any]) -> list[str]:
    domains = ", ".join(shown["allow_domains"]) or "none (the submitted URLs' hosts)"
    span = _value_text("span_hosts", shown["span_hosts"])
    return [f"  --allow-domain: {domains}", f"  --span-hosts: {span}"]


def _value_text(name: str, value: Any) -> str:
    if value is _UNUSABLE:
        return "not usable"
    if _flag(name).parse is None:
        return "yes" if value != _field(name).default else "no"
    return to_text(name, value)
