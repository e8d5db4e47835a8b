"""``python -m hashcrawl`` and the ``hashcrawl`` script.

Nothing heavy is imported before the Ctrl-C guard: a Ctrl-C while the command starts
says one line, not an import traceback.
"""

import sys


def run() -> int:
    """Run the command line; a Ctrl-C before it has taken over the signals exits 130."""
    try:
        from hashcrawl._cli._commands import main

        return main()
    except KeyboardInterrupt:
        print("hashcrawl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(run())
