"""Fixed against adaptive revisits on a real crawl, judged from the test site's own log.

A loopback site (testing/revisitsite.py, one host) serves pages that change every
"minute", every five "minutes" or never, each kind serving an ETag (and Last-Modified),
only Last-Modified, or neither. Two `hashcrawl join` processes crawl it with
`--revisit MINUTE` (the interval a user picks who wants the fastest pages' changes
within a "minute") and then, on a fresh crawl of a fresh site, with `--revisit adaptive
--revisit-min MINUTE --revisit-max 30*MINUTE` (the same freshness for lively pages; a
quiet page may wait half an "hour"), for the same run time each; the owner of the
site's host is SIGKILLed halfway. Time is scaled: a "minute" is MINUTE seconds. For each
schedule it prints, from the site's log alone (testing/revisitjudge.py), per class of
page (fast, slow, never): changes made and seen, how late (mean and worst) and whether
within the bound, fetches per change detected; over all changes the same; the crawler's
lateness over each record's due time (the rule replayed from the log) and the host's
idle time while a page was due; 304s and conditional headers received; and every gap
between two requests (robots.txt too) against --delay, exactly. Then a table of both.
With --log-dir each run's log is kept there as JSON lines.

    scripts/bench --revisits [--minute S] [--minutes N] [--delay D] [--log-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import attrs

from hashcrawl._core._revisit import Policy
from hashcrawl._core._settings import Settings
from hashcrawl._store._server import RedisServer
from testing.fleet import Processes, flags, status_of, submit, wait_until
from testing.revisitjudge import RESOLUTION, Bound, judge
from testing.revisitsite import Page, RevisitSite

KINDS = ("etag", "lastmod", "none")
FAST, SLOW = 1, 5  # "minutes" between a changing page's changes
EACH = 2  # pages of each kind and period
LEASE = 2.0


def pages(minute: float) -> list[Page]:
    periods = (FAST * minute, SLOW * minute, None)
    return [
        Page(kind=kind, period=period) for kind in KINDS for period in periods for _ in range(EACH)
    ]


def run(
    schedule: list[str], minute: float, minutes: int, delay: float, redis_url: str
) -> tuple[RevisitSite, float, float]:
    """Crawl a fresh site with ``schedule``'s flags for ``minutes`` "minutes", two workers,
    the site's owner SIGKILLed halfway; returns the site (its log), the kill's time and
    the run's end."""
    crawl = "cmp" + uuid.uuid4().hex[:8]
    worker_flags = flags(delay=delay, lease=LEASE, idle="none", **_named(schedule))
    with (
        tempfile.TemporaryDirectory() as directory,
        RevisitSite(pages(minute)) as site,
        Processes(redis_url, crawl, Path(directory)) as fleet,
    ):
        submit(redis_url, crawl, [site.url()])
        for _ in range(2):
            fleet.join(*worker_flags)
        wait_until(lambda: len(status_of(redis_url, crawl)["members"]) == 2, what="2 members")
        span = minutes * minute
        _sleep_until(site, span / 2)
        fleet.busiest_member().signal(signal.SIGKILL)
        killed = site.now()
        _sleep_until(site, span)
        ended = site.now()
    return site, killed, ended


def _named(schedule: list[str]) -> dict[str, str]:
    return {
        name.removeprefix("--").replace("-", "_"): value
        for name, value in zip(schedule[::2], schedule[1::2], strict=True)
    }


def _sleep_until(site: RevisitSite, at: float) -> None:
    while site.now() < at:
        time.sleep(min(0.5, at - site.now()))


def bound_of(delay: float) -> Bound:
    beat = Settings(lease=LEASE).beat_interval
    # A kill: the lease runs out, a heartbeat finds the owner gone, the survivor reads the
    # dead owner's entries (their own lease) and paces the host from nothing it knows.
    return Bound(beat_s=beat, delay_s=delay, pages=len(pages(1.0)) + 1, kill_s=2 * LEASE + beat)


def report(name: str, got: dict[str, Any], bound: Bound, killed: float, minute: float) -> list[str]:
    """One schedule's figures, a line each."""
    lines = [f"{name}: {got['requests']} requests, the owner SIGKILLed at {killed:.1f} s"]
    for kind, c in got["classes"].items():
        if kind == "never":
            lines.append(
                f"  never:  {c['fetches']} fetches ({c['per_page']:.1f} a page), first gap "
                f"{c['first_gap']:.2f} s, last gap {c['last_gap']:.2f} s"
            )
            continue
        lines.append(
            f"  {kind}:  changes {c['made']}, seen {c['seen']}, past their bound "
            f"{c['past_bound']}; late mean {c['late_mean']:.2f} s, worst {c['late_max']:.2f} s "
            f'({c["late_mean"] / minute:.2f} / {c["late_max"] / minute:.2f} "minutes"); '
            f"{c['fetches']} fetches, {c['detected']} changes detected, "
            f"{c['per_change']:.2f} fetches per change"
        )
    past = [ch for ch in got["changes"] if ch.seen is None or ch.seen > ch.due_by]
    lines += [
        f"  all:    changes {len(got['changes'])}, past their bound {len(past)}"
        + "".join(f" (made {ch.at - killed:+.1f} s from the kill)" for ch in past)
        + f"; late mean {got['late_mean']:.2f} s, worst {got['late_max']:.2f} s; "
        f"{got['fetches']} page fetches, {got['detected']} changes detected, "
        f"{got['fetches'] / max(1, got['detected']):.2f} fetches per change",
        f"  due:    requests after their due time (the rule replayed): mean "
        f"{got['over_mean']:.2f} s, worst {got['over_max']:.2f} s, {got['over_max_killed']:.2f} s "
        f"across the kill; past the bound {got['past_over']}; the host idle while a page "
        f"was due past the pipeline: worst {got['idle_max']:.3f} s",
        f"  http:   304s {got['304s']}, If-None-Match {got['if-none-match']}, "
        f"If-Modified-Since {got['if-modified-since']}",
        f"  pace:   gaps under --delay {bound.delay_s:g} s (less {RESOLUTION:g} s, the log "
        f"clock's resolution): {got['rude']}; smallest {got['smallest_gap']:.4f} s",
    ]
    return lines


def table(results: dict[str, dict[str, Any]]) -> list[str]:
    """Both schedules side by side, per class."""
    names = list(results)
    rows = [f"| | {' | '.join(names)} |", "|---|" + "---|" * len(names)]
    for kind in ("fast", "slow"):
        for label, key, form in (
            ("late mean / worst, s", ("late_mean", "late_max"), "{:.2f} / {:.2f}"),
            ("fetches per change", ("per_change",), "{:.2f}"),
            ("changes seen / made, past bound", ("seen", "made", "past_bound"), "{} / {}, {}"),
        ):
            cells = [form.format(*(results[n]["classes"][kind][k] for k in key)) for n in names]
            rows.append(f"| {kind}: {label} | {' | '.join(cells)} |")
    cells = [
        f"{r['classes']['never']['per_page']:.1f}, {r['classes']['never']['last_gap']:.1f} s"
        for r in results.values()
    ]
    rows.append(f"| never: fetches a page, last gap | {' | '.join(cells)} |")
    for label, form in (
        ("all: late mean / worst, s", "{late_mean:.2f} / {late_max:.2f}"),
        ("all: page fetches, changes detected", "{fetches}, {detected}"),
        ("304s, If-None-Match, If-Modified-Since", "{304s}, {if-none-match}, {if-modified-since}"),
        ("due: mean / worst over, s", "{over_mean:.2f} / {over_max:.2f}"),
        ("gaps under --delay; smallest, s", "{rude}; {smallest_gap:.4f}"),
    ):
        rows.append(f"| {label} | {' | '.join(form.format(**r) for r in results.values())} |")
    per = [f"{r['fetches'] / max(1, r['detected']):.2f}" for r in results.values()]
    rows.append(f"| **all: fetches per change detected** | {' | '.join(per)} |")
    return rows


def saved(site: RevisitSite, directory: Path | None, name: str) -> None:
    if directory is None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (name.split()[0] + ".jsonl")
    with path.open("w") as out:
        out.write(json.dumps({"pages": [attrs.asdict(p) for p in site.pages]}) + "\n")
        for hit in site.log:
            out.write(json.dumps(attrs.asdict(hit)) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/bench --revisits", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--minute", type=float, default=4.0, help="seconds per scaled minute")
    parser.add_argument("--minutes", type=int, default=40, help="scaled minutes per run")
    parser.add_argument("--delay", type=float, default=0.1)
    parser.add_argument("--log-dir", type=Path, help="keep each run's site log here")
    args = parser.parse_args(argv)
    minute = args.minute
    if minute != int(minute):
        parser.error("--minute: whole seconds (--revisit takes whole seconds)")
    m = int(minute)
    schedules = {
        f"fixed --revisit {m}": ["--revisit", str(m)],
        f"adaptive {m}-{30 * m} s": [
            "--revisit", "adaptive", "--revisit-min", str(m), "--revisit-max", str(30 * m)
        ],
    }  # fmt: skip
    bound = bound_of(args.delay)
    print(
        f"{len(pages(minute))} pages ({EACH} of each kind x period: {KINDS}, every {FAST} and "
        f'{SLOW} "minutes", never); a "minute" is {m} s; {args.minutes} "minutes" per '
        f"run; --delay {args.delay:g}; 2 workers, the owner SIGKILLed halfway\n"
        f"bound: a revisit's request by {bound.describe()}"
    )
    results = {}
    with (
        tempfile.TemporaryDirectory() as directory,
        RedisServer(directory=Path(directory)) as redis,
    ):
        for name, schedule in schedules.items():
            site, killed, end = run(schedule, minute, args.minutes, args.delay, redis.url)
            saved(site, args.log_dir, name)
            policy = Policy.parse(schedule[1], **_bounds(schedule))
            got = judge(site, policy, fast=FAST * minute, killed=killed, end=end, bound=bound)
            results[name] = got
            print("\n".join(report(name, got, bound, killed, minute)))
            sys.stdout.flush()
    print("\n".join(table(results)))
    return 0


def _bounds(schedule: list[str]) -> dict[str, int]:
    named = _named(schedule)
    return {k.removeprefix("revisit_").replace("min", "low").replace("max", "high"): int(v)
            for k, v in named.items() if k != "revisit"}  # fmt: skip
