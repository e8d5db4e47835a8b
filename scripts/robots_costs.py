"""Parse and per-URL check time of a 9.4 MiB robots.txt, as the worker reads it and whole.

Two files: plain prefix rules ("Disallow: /123/"), and wildcard rules
("Disallow: /123/*/x.php$"), the costliest kind for protego. The worker parses only the
first 500 KiB (``MAX_ROBOTS_BYTES``), in a thread, and checks rules from more than
32 KiB of text in a thread too.

    .venv/bin/python scripts/robots_costs.py
"""

from __future__ import annotations

import random
import time

from hashcrawl._web._robots import MAX_ROBOTS_BYTES, Robots


def text_of(kind: str) -> str:
    rng = random.Random(1)
    lines, size = ["User-agent: *"], 0
    while size < 9.4 * 2**20:
        n = rng.randrange(10**6)
        line = f"Disallow: /{n}/" if kind == "plain" else f"Disallow: /{n}/*/x.php$"
        if rng.random() < 0.3:
            line = f"Allow: /{n}/public"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


def main() -> None:
    for kind in ("plain", "wildcard"):
        text = text_of(kind)
        for limit in (MAX_ROBOTS_BYTES, len(text)):
            started = time.perf_counter()
            rules = Robots.parse(text[:limit], "hashcrawl/1")
            parse = time.perf_counter() - started
            rules.allowed("http://e.com/warm")  # protego indexes the rules on first use
            urls = [f"http://e.com/{i}/a/b{i}.html" for i in range(20)]
            started = time.perf_counter()
            for url in urls:
                rules.allowed(url)
            check = (time.perf_counter() - started) / len(urls)
            print(
                f"{kind:8} rules, first {limit / 1024:5.0f} KiB: parse {parse * 1000:6.0f} ms, "
                f"check {check * 1000:8.3f} ms per URL, heavy={rules.heavy}",
                flush=True,
            )


if __name__ == "__main__":
    main()
