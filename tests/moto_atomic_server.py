"""`moto_server` with S3's conditional PUT made atomic, for the tests' S3 endpoint.

moto 5 answers `PutObject` with `If-None-Match: *` by looking the key up and then storing the
object, without a lock, and its server is threaded: two concurrent creates of one key can both
succeed, the second silently replacing the first. Real S3 lets exactly one of them win, which
is what the engine's commits rely on (put-if-absent), so under load the emulator lost commits
that S3 would have refused (`test_four_processes_append_on_s3` saw version 199 of 200). This
wrapper runs moto's own server with every object PUT serialised: a fix of the emulator, not of
the code under test.

Usage (as `moto_server`): `python -m tests.moto_atomic_server -H 127.0.0.1 -p PORT`.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from moto.s3.responses import S3Response
from moto.server import main

_PUT_LOCK = threading.Lock()
_put_object = S3Response.put_object


def _atomic_put_object(self: S3Response, *args: Any, **kwargs: Any) -> Any:
    with _PUT_LOCK:  # the If-None-Match check and the store, as one step
        return _put_object(self, *args, **kwargs)


S3Response.put_object = _atomic_put_object  # type: ignore[method-assign]

if __name__ == "__main__":
    main(sys.argv[1:])
