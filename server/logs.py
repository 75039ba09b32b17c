"""One log format for everything a `tierstore` process says on its console.

`tierstore serve` used to print three formats on one console: uvicorn's own ("INFO:     Started
server process [42]"), bare `tierstore: ...` prints, and Python's logging default. Now every
line, ours and the libraries' (uvicorn included: it gets no logging config of its own), goes
through the root logger's one handler on stderr:

    2026-12-01 08:00:00,123 INFO tierstore: listening on http://127.0.0.1:9000 (data in /srv/data)

Scripts and tests wait for the substring `tierstore: listening on`, which this format keeps.
uvicorn's start-up and shutdown chatter repeats what our banner and drain messages say, so its
loggers show warnings and errors only, unless `log_level = "debug"`.

The access log is the one exception, on purpose: one bare JSON object per line (logger
`tierstore.access`, `server.request_observer`), for machines to parse. It is off unless
`server.access_log` turns it on, so that a trial run's console shows what the server does,
not every request.
"""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.asgi")

# What the process says about itself: where it listens, its workers, its daemon.
console = logging.getLogger("tierstore")


def configure(level: str) -> None:
    """Configure logging once per process, before anything logs (uvicorn is told not to)."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    logging.basicConfig(level=min(numeric, logging.INFO), format=FORMAT, stream=sys.stderr, force=True)
    # `log_level` holds for every logger but the banner's, which scripts wait for even at "warning".
    handler = logging.getLogger().handlers[0]
    handler.addFilter(lambda record: record.levelno >= numeric or record.name == console.name)
    for name in UVICORN_LOGGERS:
        logging.getLogger(name).setLevel(
            numeric if numeric <= logging.DEBUG else max(numeric, logging.WARNING)
        )
