"""Tier backends. Importing this package registers every built-in kind with `tiering.backend`."""

from tiering.backends import (
    erasure_coded,  # noqa: F401  (registers "erasure")
    local_files,  # noqa: F401  (registers "files")
    memory,  # noqa: F401  (registers "memory")
    s3_remote,  # noqa: F401  (registers "s3")
)
