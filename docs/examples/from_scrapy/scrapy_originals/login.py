"""A login through the page's form (its CSRF token kept), then pages that need the
session: the server answers the POST with 302 -> /account and a cookie."""

import os

import scrapy
from scrapy.http import FormRequest

SITE = os.environ.get("DEMO_SITE", "http://127.0.0.2:8000/")


class LoginSpider(scrapy.Spider):
    name = "login"
    start_urls = [SITE + "signin"]

    def parse(self, response):
        yield FormRequest.from_response(
            response,
            formid="login",
            formdata={"user": "ann", "password": "hunter2"},
            callback=self.after_login,
        )

    def after_login(self, response):
        yield {"user": response.css("h1.user::text").get(), "status": response.status}
        yield from response.follow_all(css="a.member", callback=self.parse_member)

    def parse_member(self, response):
        yield {
            "member": response.css("h2::text").get(),
            "secret": response.css("p.secret::text").get(),
        }
