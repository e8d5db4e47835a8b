"""The web: fetchers and their connections, addresses and proxies, requests and
responses, HTML and links, robots.txt, cookies, and the stand-ins for tests."""
