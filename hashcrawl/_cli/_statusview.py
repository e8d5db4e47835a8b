"""``hashcrawl status --json`` and ``--watch``: the fleet's figures, and their rendering.

:func:`read_view` reads what Redis holds (``status`` plus every worker's heartbeat
record, a few dead letters and the server's memory and persistence); :func:`build_view`
turns those figures into the view, without IO; :func:`render` draws it with rich, the
same on a terminal and off one. Everything drawn is a field of the view, which is what
``status --json`` prints.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from hashcrawl._cli._local import counted
from hashcrawl._run._metrics import parse_top
from hashcrawl._run._queue import Queue
from hashcrawl._store._views import _whole

DEAD_SHOWN = 5
DEAD_SCANNED = 200
HOSTS_SHOWN = 5


def read_view(queue: Queue) -> dict[str, Any]:
    """The whole view of a crawl, read from its Redis (a few round trips)."""
    store = queue._store
    status = queue.status()
    members = [m["id"] for m in status["members"]]
    records = store.worker_records()
    return build_view(
        status,
        records,
        members=members,
        dead=store.some_dead(DEAD_SCANNED),
        server={**store.server_info(), "idle_since_ms": queue.idle_since_ms()},
    )


def build_view(
    status: dict[str, Any],
    records: Mapping[str, Mapping[str, str]],
    *,
    members: list[str],
    dead: Mapping[str, str],
    server: Mapping[str, Any],
) -> dict[str, Any]:
    """``status`` with rates, per-worker figures, hosts, errors, dead letters and Redis."""
    now_ms = int(server.get("now_ms", time.time() * 1000))
    live = [_member(m, records.get(m["id"], {}), now_ms) for m in status["members"]]
    totals = _sum(records.values())
    idle_since = server.get("idle_since_ms")
    return {
        **status,
        "members": live,
        "pages_per_s": round(sum(m["per_minute"] for m in live) / 60, 2),
        "items": totals.get("items", 0),
        "in_flight": sum(m["in_flight"] for m in live),
        "idle_s": None if idle_since is None else round(max(0, now_ms - idle_since) / 1000, 1),
        "bytes": totals.get("bytes", 0),
        "retries": totals.get("retries", 0),
        "dead_letters": totals.get("dead_letters", 0),
        "statuses": _prefixed(totals, "status_"),
        "errors": _prefixed(totals, "error_"),
        "busiest_hosts": _top_hosts(records, members, "busiest"),
        "backed_off_hosts": _top_hosts(records, members, "backed_off"),
        "recent_dead": _recent_dead(dead),
        "redis": _redis_view(server),
    }


def _int(record: Mapping[str, str], field: str) -> int:
    return _whole(record.get(field))


def _member(member: dict[str, Any], record: Mapping[str, str], now_ms: int) -> dict[str, Any]:
    beat = member.get("last_heartbeat_ms") or 0
    return {
        **member,
        "per_minute": _int(record, "per_minute"),
        "in_flight": _int(record, "in_flight"),
        "held": _int(record, "held"),
        "failed": _int(record, "failed"),
        "rss_mib": round(_int(record, "rss_kib") / 1024, 1),
        "heartbeat_age_s": round(max(0, now_ms - beat) / 1000, 1) if beat else None,
    }


def _sum(records: Any) -> dict[str, int]:
    totals: dict[str, int] = {}
    for record in records:
        for field, value in record.items():
            if field != "pid" and value.lstrip("-").isdigit():
                totals[field] = totals.get(field, 0) + int(value)
    return totals


def _prefixed(totals: Mapping[str, int], prefix: str) -> dict[str, int]:
    found = {k.removeprefix(prefix): v for k, v in totals.items() if k.startswith(prefix)}
    return dict(sorted(found.items(), key=lambda kv: (-kv[1], kv[0])))


def _top_hosts(
    records: Mapping[str, Mapping[str, str]], members: list[str], field: str
) -> list[dict[str, Any]]:
    pairs = [
        (figure, host, m)
        for m in members
        for host, figure in parse_top(records.get(m, {}).get(field, ""))
    ]
    key = "queued" if field == "busiest" else "backoff_s"
    return [
        {"host": host, key: figure, "owner": m}
        for figure, host, m in sorted(pairs, key=lambda p: (-p[0], p[1]))[:HOSTS_SHOWN]
    ]


def _recent_dead(dead: Mapping[str, str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for url, text in dead.items():
        try:
            record = json.loads(text)
            error, at = str(record.get("error", "")), float(record.get("at", 0))
        except (ValueError, AttributeError, TypeError):
            error, at = text, 0.0
        rows.append({"url": url, "error": error[:120], "at": at})
    rows.sort(key=lambda r: (-r["at"], r["url"]))
    return rows[:DEAD_SHOWN]


def _redis_view(server: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "used_memory": server.get("used_memory_human"),
        "peak_memory": server.get("used_memory_peak_human"),
        "maxmemory": server.get("maxmemory_human"),
        "maxmemory_policy": server.get("maxmemory-policy", server.get("maxmemory_policy")),
        "appendonly": bool(server.get("aof_enabled")) if "aof_enabled" in server else None,
        "appendfsync": server.get("appendfsync"),
        "save": server.get("save"),
    }


# -- rendering -----------------------------------------------------------------------


def render(view: dict[str, Any]) -> Group:
    """The view as rich renderables: totals, workers, hosts, errors, dead, Redis."""
    workers = _workers(view) if view["members"] else Text("no live workers")
    parts: list[Any] = [_headline(view), workers]
    hosts = _hosts(view)
    if hosts is not None:
        parts.append(hosts)
    parts.append(_counts(view))
    if view["recent_dead"]:
        parts.append(_dead(view))
    parts.append(_redis_line(view))
    return Group(*parts)


def _headline(view: dict[str, Any]) -> Text:
    state = "ended" if view["ended"] else counted(view["workers"], "worker")
    return Text(
        f"crawl {view['crawl']}: {state}, {view['fetched']:,} fetched "
        f"({view['pages_per_s']:.1f}/s over the last minute), {counted(view['items'], 'item')}, "
        f"{view['waiting']:,} waiting, {view['held']:,} held, {view['in_flight']} in flight, "
        f"{view['failed']:,} failed, {view['dead']:,} dead, seen {view['seen']:,}"
    )


def _workers(view: dict[str, Any]) -> Table:
    table = Table(title="workers", title_justify="left", box=None, pad_edge=False)
    for name in ("worker", "hosts", "fetched", "/min", "in flight", "held", "beat", "MiB"):
        table.add_column(name, justify="left" if name == "worker" else "right")
    for m in view["members"]:
        age = m["heartbeat_age_s"]
        table.add_row(
            m["id"],
            f"{m['hosts']:,}",
            f"{m['fetched']:,}",
            f"{m['per_minute']:,}",
            str(m["in_flight"]),
            f"{m['held']:,}",
            "?" if age is None else f"{age:.1f}s",
            f"{m['rss_mib']:.0f}",
        )
    return table


def _hosts(view: dict[str, Any]) -> Table | None:
    busy, slow = view["busiest_hosts"], view["backed_off_hosts"]
    if not busy and not slow:
        return None
    table = Table(box=None, pad_edge=False)
    table.add_column("busiest host")
    table.add_column("queued", justify="right")
    table.add_column("most backed-off host")
    table.add_column("for", justify="right")
    for i in range(max(len(busy), len(slow))):
        b = busy[i] if i < len(busy) else None
        s = slow[i] if i < len(slow) else None
        table.add_row(
            b["host"] if b else "",
            f"{b['queued']:,}" if b else "",
            s["host"] if s else "",
            f"{s['backoff_s']}s" if s else "",
        )
    return table


def _counts(view: dict[str, Any]) -> Text:
    statuses = ", ".join(f"{k} {v:,}" for k, v in view["statuses"].items()) or "none"
    errors = ", ".join(f"{k} {v:,}" for k, v in view["errors"].items()) or "none"
    return Text(
        f"statuses: {statuses}\nerrors: {errors}\n"
        f"retries {view['retries']:,}, dead-lettered {view['dead_letters']:,}, "
        f"leases reclaimed {view['leases_reclaimed']:,}, queue_bad {view['queue_bad']:,}"
        + _revisits(view.get("revisits"))
    )


def _revisits(figures: dict[str, int] | None) -> str:
    """A line for a crawl that revisits; nothing for one that does not."""
    if not figures or not figures.get("pages"):
        return ""
    return (
        f"\nrevisits: {counted(figures['pages'], 'page')}, due now {figures['due_now']:,} (overdue "
        f"{figures['overdue']:,}), due in the next hour {figures['due_next_hour']:,}, "
        f"changes found {figures['changed']:,}, unchanged {figures['unchanged']:,}"
    )


def _dead(view: dict[str, Any]) -> Table:
    table = Table(title="recent dead letters", title_justify="left", box=None, pad_edge=False)
    table.add_column("url", overflow="fold")
    table.add_column("last error", overflow="fold")
    for row in view["recent_dead"]:
        table.add_row(row["url"], row["error"])
    return table


def _redis_line(view: dict[str, Any]) -> Text:
    r = view["redis"]
    aof = {True: "on", False: "off", None: "?"}[r["appendonly"]]
    return Text(
        f"redis: {r['used_memory'] or '?'} used (peak {r['peak_memory'] or '?'}, max "
        f"{r['maxmemory'] or '?'}, policy {r['maxmemory_policy'] or '?'}); appendonly {aof}, "
        f"appendfsync {r['appendfsync'] or '?'}, save '{r['save'] or ''}'"
    )


def render_text(view: dict[str, Any], *, width: int = 100) -> str:
    """The view as plain text of a fixed width, without escape codes."""
    console = Console(width=width, force_terminal=False, color_system=None, record=True)
    with console.capture() as captured:
        console.print(render(view))
    return captured.get()


def watch(read: Callable[[], dict[str, Any]], interval: float, console: Console) -> None:
    """Redraw the view every ``interval`` seconds until Ctrl-C; off a terminal, print it."""
    if not console.is_terminal:
        while True:
            console.print(render(read()))
            console.print()
            time.sleep(interval)
    from rich.live import Live

    with Live(console=console, auto_refresh=False) as live:
        while True:
            live.update(render(read()), refresh=True)
            time.sleep(interval)


def watch_status(queue: Queue, interval: float) -> int:
    """``status --watch``: the live view on standard output until Ctrl-C."""
    with contextlib.suppress(KeyboardInterrupt):
        watch(lambda: read_view(queue), interval, Console(highlight=False))
    return 0
