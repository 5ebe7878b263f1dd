"""A worker process converting blocks of an accounting file (line_blocks.in_file_order_processes):
started as `python -m jobsight.analytics.ingest.parsers.block_worker` with one polars thread, it
reads (function, args) calls from stdin and writes each result (or the exception it raised) to
stdout, in order, as length-prefixed pickles, until stdin ends. Only the parent that started it
writes to it. Anything the code prints goes to stderr, never into the results."""
from __future__ import annotations

import os
import pickle
import sys
from typing import BinaryIO, Optional

HEAD = 8   # the bytes of a message's length


def read_message(fh: BinaryIO) -> Optional[bytes]:
    """The next length-prefixed message of fh, None at its end."""
    head = fh.read(HEAD)
    if len(head) < HEAD:
        return None
    n = int.from_bytes(head, "little")
    data = fh.read(n)
    if len(data) < n:
        raise EOFError(f"a message of {n} bytes ended after {len(data)}")
    return data


def write_message(fh: BinaryIO, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fh.write(len(data).to_bytes(HEAD, "little"))
    fh.write(data)
    fh.flush()


def main() -> int:
    results = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                 # a print() in the code run here goes to stderr
    calls = sys.stdin.buffer
    while (data := read_message(calls)) is not None:
        fn, args = pickle.loads(data)
        try:
            out = (True, fn(*args))
        except Exception as exc:  # handed to the parent, which raises it
            out = (False, exc)
        try:
            write_message(results, out)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            write_message(results, (False, RuntimeError(f"{fn.__name__}: result not sent: {exc!r}")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
