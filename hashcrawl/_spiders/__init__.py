"""Spiders: the spider class and its calls, forms, Scrapy's link rules, sitemaps, and
the default parse of large pages in a process of its own."""
