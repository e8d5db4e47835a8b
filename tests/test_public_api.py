"""The public surface: exactly what hashcrawl.__all__ names, and nothing else."""

import hashcrawl


def test_all_lists_every_public_name():
    """Every name in __all__ exists, and every public attribute is in __all__."""
    public = {name for name in dir(hashcrawl) if not name.startswith("_")}
    assert set(hashcrawl.__all__) - {"__version__"} == public
    for name in hashcrawl.__all__:
        assert hasattr(hashcrawl, name)


def test_public_classes_live_in_private_modules():
    """The real code sits in underscore modules; the package only re-exports it."""
    for name in hashcrawl.__all__:
        value = getattr(hashcrawl, name)
        module = getattr(value, "__module__", "hashcrawl._")
        assert module.startswith("hashcrawl._"), (name, module)
        assert all(part.startswith("_") for part in module.split(".")[1:]), (name, module)


def test_errors_form_one_tree():
    """Every hashcrawl error is a HashcrawlError; config errors are ValueErrors."""
    assert issubclass(hashcrawl.ConfigError, ValueError)
    assert issubclass(hashcrawl.InvalidURL, hashcrawl.ConfigError)
    assert issubclass(hashcrawl.QueueError, ConnectionError)
    assert issubclass(hashcrawl.Refused, hashcrawl.FetchError)
    for name in ("ConfigError", "InvalidURL", "QueueError", "Fenced", "FetchError", "Refused"):
        assert issubclass(getattr(hashcrawl, name), hashcrawl.HashcrawlError)
