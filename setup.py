"""Optional compiled build: `TIERSTORE_COMPILE=1 pip install -e .` compiles the modules below with
mypyc (C extensions beside the sources; a C compiler is needed then). Without it everything runs as
plain Python: the same source either way. Experimental: plain Python is the default, and CI runs the
unit tests and the cluster, PostgreSQL and client passes on the compiled build too.

Why: a small PUT's server CPU is ~60 % interpreted Python spread over ~700 calls, no one of them
worth a change of its own (bench/RESULTS.md, "A compiled build"). Compiling the modules a
4 KiB PUT spends its time in takes part of that work out of the interpreter.

What a compiled module's code may not do (mypyc 2.4.1; the build fails loudly on the first four):
async generators; `continue` or `break` inside a `with` or `try`/`finally` block; `cls.__new__`;
an attribute named `_thread` (its C field would be `__thread`, a C keyword). And at run time: no
`__dict__` on its classes (`dataclasses.replace`, not `**record.__dict__`); a class the interpreted
code subclasses needs `@mypyc_attr(allow_interpreted_subclasses=True)`; calls inside a compiled
module go straight to its functions, so a test cannot replace one of them with monkeypatch.

And no coroutine may suspend while it handles an exception: no `await` in an `except` or
`finally` block, no `async with` (its exit awaits with the body's exception at hand). Compiled, a
coroutine keeps no exception state of its own: resumed, it finds another frame's, and its re-raise
takes that (and so does the context of the next exception it raises), and leaving the block
restores the saved state into the wrong frame. A PUT refused for its write quorum re-raised a
stale exception instead, under uvloop an invalid object that killed the server ("TypeError:
invalid exception object"). Catch, leave the block, then clean up and raise the caught exception:
`except BaseException as exc: failure = exc`, then `await cleanup(); raise failure` after it.
tests/unit/test_compiled_rules.py checks the source for these.

And a speed note: a dataclass's generated `__init__` is Python code, interpreted even here (a frozen
one of five fields: 0.65 µs to build, against 0.03 µs written out). The records a request builds
write theirs out, setting frozen fields with a literal `object.__setattr__(self, "name", value)`,
which mypyc turns into a plain store (an alias of it stays a call); tests/unit/test_written_out_inits.py
holds each to its fields.

What is not here, and why:
- modules with async generators (server/responses.py,
  server/signature/payload.py, tiering/store.py, tiering/backends/erasure_coded.py,
  erasure/reader.py's streaming reader, server/handlers/byteranges.py): what a small GET runs per
  request was moved out of them (erasure/whole_reads.py, server/handlers/get.py) to compile;
- classes that subclass another library's Python class (server/metrics.py's collectors): a
  compiled subclass of an interpreted class is not supported reliably (a transport that subclassed
  asyncio's crashed the worker; server/http_protocol.py is compiled because it subclasses nothing);
- erasure/durability.py: the unit tests replace its `_flush` to inject a failed flush, which a
  compiled durability.py would not see.
"""

from __future__ import annotations

import os
from typing import Any

from setuptools import setup

COMPILED_MODULES = [
    "erasure/checksum.py",
    "erasure/drive_counters.py",
    "erasure/drive_health.py",
    "erasure/location.py",
    "erasure/pack.py",
    "erasure/placement.py",
    "erasure/pool.py",
    "erasure/shard_format.py",
    "erasure/shard_store.py",
    "erasure/stripe.py",
    "erasure/topology.py",
    "erasure/whole_reads.py",
    "erasure/writer.py",
    "server/access/acl.py",
    "server/access/actions.py",
    "server/access/context.py",
    "server/access/decision.py",
    "server/app.py",
    "server/authorization.py",
    "server/context.py",
    "server/credentials.py",
    "server/encryption.py",
    "server/handlers/access_api.py",
    "server/handlers/common.py",
    "server/handlers/get.py",
    "server/handlers/object_lock.py",
    "server/handlers/put.py",
    "server/header_text.py",
    "server/http_protocol.py",
    "server/http_semantics.py",
    "server/request_headers.py",
    "server/request_observer.py",
    "server/request_tally.py",
    "server/router.py",
    "server/signature/canonical.py",
    "server/signature/context.py",
    "server/signature/dates.py",
    "server/signature/keys.py",
    "server/signature/sigv4.py",
    "server/signature/verify.py",
    "tiering/catalog/objects.py",
    "tiering/catalog/rows.py",
    "tiering/catalog/sqlite.py",
    "tiering/changes.py",
    "tiering/checksums.py",
    "tiering/clock.py",
    "tiering/conditions.py",
    "tiering/data_ids.py",
    "tiering/peers.py",
    "tiering/records.py",
    "tiering/small_writes.py",
    "tiering/tiers.py",
]


def ext_modules() -> list[Any]:
    if os.environ.get("TIERSTORE_COMPILE") != "1":
        return []
    if os.environ.get("TIERSTORE_LISTING_BUILD_REQUIREMENTS") == "1":
        return []  # setuptools listing what to install for the build: mypy is not there yet
    from mypyc.build import mypycify  # the build requirement deploy/build_backend.py adds

    # pip builds in an environment of its own, without the dependencies: their types are unknown
    # to the compiler there (treated as Any, called the way the interpreter would). Ours are what
    # the compiled code is made of.
    options = ["--ignore-missing-imports", "--no-warn-unused-ignores"]
    return mypycify([*options, *COMPILED_MODULES], opt_level="3")


setup(ext_modules=ext_modules())
