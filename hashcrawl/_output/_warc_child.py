"""The WARC writer process (``python -m hashcrawl._output._warc_child OPTIONS``): an
in-process :class:`WarcSink` fed by the pipe on standard input (see ``_warc_writer``)."""

from __future__ import annotations

import json
import os
import signal
import sys

from hashcrawl._output._warc import WarcSink
from hashcrawl._output._warc_writer import LENGTH, PIPE_SIZE, read_exactly, read_fetch


def main(argv: list[str]) -> int:
    """Keep each fetch sent, flush or close when asked, answer how it went."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    options = json.loads(argv[0])
    worker = options.pop("worker")
    sink = WarcSink(**options)
    sink.named_for(worker)
    stdin = os.fdopen(0, "rb", buffering=PIPE_SIZE)
    out = sys.stdout.buffer
    while kind := stdin.read(1):
        if kind == b"R":
            sink.keep(read_fetch(stdin))
        elif kind == b"N":
            size = LENGTH.unpack(read_exactly(stdin, LENGTH.size))[0]
            sink.named_for(read_exactly(stdin, size).decode())
        else:
            try:
                if kind == b"F":
                    sink.flush()
                else:
                    sink.close()
                answer = b"K" + json.dumps(sink.files).encode()
            except Exception as exc:
                answer = b"E" + f"{type(exc).__name__}: {exc}".encode(errors="replace")
            out.write(answer[:1] + LENGTH.pack(len(answer) - 1) + answer[1:])
            out.flush()
            if kind == b"C":
                return 0
    sink.close()  # the worker is gone: what it sent is written, acknowledged or not
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
