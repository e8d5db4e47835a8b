"""Redis: the store, its Lua scripts, Redis URLs, and a crawl's settings as stored."""
