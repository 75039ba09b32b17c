"""The "erasure" tier backend: built from config, StoredData round trip, errors mapped."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

import tiering.backends.erasure_coded  # noqa: F401  (registers "erasure")
from tiering.backend import DataNotFound, DataUnavailable, StoredData, WriteQuorumLost, create_backend
from tiering.backends.erasure_coded import ErasureCodedBackend


def make(tmp_path: Path) -> ErasureCodedBackend:
    backend = create_backend(
        "erasure",
        name="hot",
        root=tmp_path,
        nodes=3,
        drives_per_node=2,
        k=4,
        m=2,
        block_size=8192,
        small_object_threshold=1024,
    )
    assert isinstance(backend, ErasureCodedBackend)
    return backend


async def read(
    backend: ErasureCodedBackend, stored: StoredData, start: int = 0, end: int | None = None
) -> bytes:
    reader = await backend.open_reader(stored)
    try:
        return b"".join([c async for c in reader.stream(start, stored.size if end is None else end)])
    finally:
        await reader.close()


def test_round_trip_and_error_mapping(tmp_path: Path) -> None:
    backend = make(tmp_path)
    data = random.Random(1).randbytes(100_000)

    async def scenario() -> None:
        await backend.start()
        writer = await backend.create_writer("blob-1", len(data))
        await writer.write(data)
        stored = await writer.finish()
        assert stored.size == len(data) and stored.location["layout"] == "ec"
        assert await read(backend, stored, 5, 50_000) == data[5:50_000]
        assert await backend.exists(stored)
        assert backend.stats()["online"] == 6

        backend.pool.topology.set_offline("n1")
        backend.pool.topology.set_offline("n2")
        with pytest.raises(DataUnavailable):
            await read(backend, stored)
        with pytest.raises(WriteQuorumLost):
            w = await backend.create_writer("blob-2")
            await w.write(data)
            await w.finish()
        backend.pool.topology.set_online("n1")
        backend.pool.topology.set_online("n2")

        result, healed = await backend.heal(stored)
        assert result.clean and healed == stored
        await backend.delete(stored)
        assert not await backend.exists(stored)
        with pytest.raises(DataNotFound):
            await backend.open_reader(stored)
        await backend.close()

    asyncio.run(scenario())
