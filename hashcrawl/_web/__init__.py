"""The web: fetching, addresses, HTML and links, robots.txt, sitemaps, cookies,
responses, spiders and sinks."""
