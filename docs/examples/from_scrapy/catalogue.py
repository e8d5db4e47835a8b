"""A CrawlSpider on a catalogue: categories are followed (but not their third pages),
products parsed, carts and reviews never requested."""

import os

from hashcrawl import CrawlSpider, LinkExtractor, Rule

SITE = os.environ.get("DEMO_SITE", "http://127.0.0.2:8000/")


class CatalogueSpider(CrawlSpider):
    name = "catalogue"
    start_urls = [SITE + "shop/"]
    rules = (
        Rule(LinkExtractor(allow=r"/shop/category/", deny=r"/page/3$")),
        Rule(
            LinkExtractor(
                allow=r"/shop/product/\d+$",
                deny=(r"/cart", r"/reviews"),
                restrict_css="div.products",
            ),
            callback="parse_product",
        ),
    )

    def parse_product(self, response):
        yield {
            "name": response.css("h1::text").get(),
            "price": response.css("span.price::text").get(),
            "url": response.url,
        }
