"""What the driver takes from a response for the core, which reads no headers: its
``Set-Cookie`` values, each on its own. (An entry becomes a request, and a request an
entry, in ``_web._models``: ``Request.from_entry`` and ``Request.to_entry``.)"""

from __future__ import annotations

import httpx

from hashcrawl._web._models import Response


def set_cookies(response: Response) -> list[str]:
    """The ``Set-Cookie`` headers of ``response``, each on its own."""
    if "set-cookie" not in response.headers:
        return []
    return httpx.Headers(response.headers).get_list("set-cookie")
