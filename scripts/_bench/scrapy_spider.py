"""The peer in scripts/bench: a Scrapy crawl with scrapy-redis's scheduler and dupefilter.

Configured as an operator would for the same job as hashcrawl's: follow every link in
the site (LinkExtractor), obey robots.txt, one request in flight per domain, no delay,
64 requests in flight in all, one JSON Lines item per page (url, status, title, depth).
The queue and the seen set live in Redis (``SCHEDULER_PERSIST`` keeps them at the end so
that their memory can be measured); the crawl ends when the queue is empty and nothing
is in flight, as a lone Scrapy process does.

    python scripts/_bench/scrapy_spider.py --redis redis://... --output items.jsonl SEED...
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from scrapy.crawler import CrawlerProcess
from scrapy.http import Response
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class SiteSpider(CrawlSpider):
    name = "bench"
    rules = (Rule(LinkExtractor(), callback="parse_page", follow=True),)

    def parse_start_url(self, response: Response, **kwargs: Any) -> Iterator[dict[str, Any]]:
        return self.parse_page(response)

    def parse_page(self, response: Response) -> Iterator[dict[str, Any]]:
        yield {
            "url": response.url,
            "status": response.status,
            "title": response.css("title::text").get(),
            "depth": response.meta.get("depth", 0),
        }


def settings(redis_url: str, output: str) -> dict[str, Any]:
    return {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        "SCHEDULER_PERSIST": True,
        "SCHEDULER_FLUSH_ON_START": True,
        "SCHEDULER_IDLE_BEFORE_CLOSE": 0,
        "REDIS_URL": redis_url,
        "ROBOTSTXT_OBEY": True,
        "CONCURRENT_REQUESTS": 64,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "DOWNLOAD_DELAY": 0,
        "RANDOMIZE_DOWNLOAD_DELAY": False,
        "AUTOTHROTTLE_ENABLED": False,
        "HTTPCACHE_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "WARNING",
        "FEEDS": {output: {"format": "jsonlines"}},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("seeds", nargs="+")
    args = parser.parse_args()
    process = CrawlerProcess(settings(args.redis, args.output))
    process.crawl(SiteSpider, start_urls=args.seeds)
    process.start()


if __name__ == "__main__":
    main()
