"""The test harness: sites on loopback, worker fleets, and the runs that judge a crawl.

Tests, `scripts/` and the docs' examples import it; it is not part of the hashcrawl
distribution (pyproject's package discovery finds only `hashcrawl`, and an editable
install puts the repository root on `sys.path`, so `import testing` works there).

- `testsite`: a generated multi-host site, the server that logs every request, a judge.
- `fleet`: workers in-process and as processes, small sites, waits with deadlines.
- `practice`, `churn`: the acceptance runs behind `scripts/practice` and `scripts/churn`.
- `hostile`, `hostile_run`: a web that misbehaves on purpose, and its run and judge.
- `rawserver`: a server that writes exactly the bytes a test scripts.
- `formsite`: a login, search and API site for spiders (`python -m testing.formsite`).
- `pagesets`: a static-file server and the page sets a crawl should request.
"""
