"""scripts/bench's parts: ``python -m _bench`` with scripts/ on the path (scripts/bench runs it).

- ``__main__``: the scenarios, the default one's order of runs, and its report;
- ``static_site``: the site generator, nginx's configuration, the fallback server;
- ``crawl``: one measured crawl (Redis, the access log, rusage);
- ``memory``: the seen-filter and deep-queue measurements;
- ``onehost``: the one-host site, crawled by ``wget -r``, ``hashcrawl crawl`` and the bare loop;
- ``pyspy``: the summary of a py-spy profile;
- ``bare``: the bare trio + httpx + lxml loop (the stack's ceiling), run as a script;
- ``scrapy_spider``: the scrapy-redis peer, run as a script;
- ``capacity``: the ``--capacity`` scenario, with ``sizing``, the plan's arithmetic;
- ``cluster``: the ``--cluster`` scenario;
- ``revisits``: the ``--revisits`` scenario.
"""
