"""A paginated listing: each book's detail page gets the listing's page and price
through cb_kwargs; a book that is gone goes to the errback."""

import os

import scrapy

SITE = os.environ.get("DEMO_SITE", "http://127.0.0.2:8000/")


class BooksSpider(scrapy.Spider):
    name = "books"
    start_urls = [SITE + "books/page/1"]

    def parse(self, response):
        page = int(response.url.rsplit("/", 1)[1])
        for book in response.css("article.book"):
            yield response.follow(
                book.css("h3 a")[0],
                callback=self.parse_book,
                errback=self.book_gone,
                cb_kwargs={"page": page, "listed": book.css("p.price::text").get()},
            )
        for link in response.css("li.next a"):
            yield response.follow(link, callback=self.parse)

    def parse_book(self, response, page, listed):
        yield {
            "title": response.css("h1::text").get(),
            "upc": response.xpath("//th[text()='UPC']/following-sibling::td/text()").get(),
            "price": response.css("p.price::text").get(),
            "listed": listed,
            "page": page,
        }

    def book_gone(self, failure):
        yield {"gone": failure.request.url, "status": failure.value.response.status}
