"""Reading a py-spy profile: the top functions of a worker's main thread.

py-spy's ``raw`` format is one collapsed stack per line (``frame;frame;... count``).
Samples of other threads (trio's thread cache, where Redis calls block) are left out:
the main thread is where a worker's CPU goes.
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

_LINE = re.compile(r":\d+\)$")


def top(path: Path, count: int = 15) -> str:
    own: collections.Counter[str] = collections.Counter()
    within: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if not stack or "Thread._bootstrap" in stack:
            continue
        n = int(samples)
        total += n
        frames = [_LINE.sub(")", frame) for frame in stack.split(";")]
        own[frames[-1]] += n
        for frame in set(frames):
            within[frame] += n
    lines = [f"main-thread samples: {total}", "", "self time:"]
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(count)]
    lines += ["", "inclusive time (hashcrawl's own frames, and the libraries it calls):"]
    interesting = [(f, n) for f, n in within.most_common() if _worth_showing(f)]
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in interesting[: count * 2]]
    return "\n".join(lines)


def _worth_showing(frame: str) -> bool:
    boring = ("runpy", "_cli.py", "__main__", "trio/_core/_run.py", "contextlib.py")
    return not any(b in frame for b in boring)
