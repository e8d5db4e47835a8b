__version__ = "0.1.0"
DEFAULT_USER_AGENT = f"hashcrawl/{__version__} (+https://pypi.org/project/hashcrawl/)"
