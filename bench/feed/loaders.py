"""Datasets and DataLoaders for `run.py`: the same samples from tierstore (s3torchconnector) or local files.

Every sample is a fixed-size blob whose first 8 bytes are its index (little-endian int64), so a
consumer can check, per batch and for almost nothing, that it got exactly the samples its sampler
asked for, in order. Samples become 1-D uint8 tensors in the DataLoader worker and are stacked by
the default collate there, i.e. straight into shared memory: the consuming thread receives a handle,
not 45 MB of pickled bytes, exactly as it would for image tensors.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

REGION = "us-east-1"


def make_sample(index: int, size: int, rng: random.Random) -> bytes:
    return index.to_bytes(8, "little") + rng.randbytes(size - 8)


def sample_index(batch: torch.Tensor) -> list[int]:
    """The index stored in the first 8 bytes of each row of a stacked uint8 batch."""
    head = batch[:, :8].contiguous()
    return head.view(torch.int64).flatten().tolist()


def _as_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(data, dtype=torch.uint8)


def s3_sample(reader) -> torch.Tensor:
    """s3torchconnector transform (module level: worker processes must be able to find it)."""
    return _as_tensor(reader.read())


class LocalFiles(Dataset):
    """The reference: a plain torch map-style Dataset that opens and reads one local file per sample."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = [str(p) for p in paths]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        with open(self.paths[index], "rb") as f:
            return _as_tensor(f.read())


class ShardSampler(Sampler[int]):
    """Accelerator `rank` of `world`: its strided share of the dataset, reshuffled every pass
    (MLPerf's file/sample shuffle with a seed), for exactly `count` samples (several passes if needed)."""

    def __init__(self, n: int, rank: int, world: int, count: int, seed: int) -> None:
        self.shard = list(range(rank, n, world))
        self.count = count
        self.seed = seed

    def order(self) -> list[int]:
        out: list[int] = []
        rng = random.Random(self.seed)
        while len(out) < self.count:
            shard = self.shard[:]
            rng.shuffle(shard)
            out.extend(shard)
        return out[: self.count]

    def __iter__(self) -> Iterator[int]:
        return iter(self.order())

    def __len__(self) -> int:
        return self.count


def _quiet_worker(_: int) -> None:
    # torch.frombuffer on an immutable bytes object warns once per process; the collate copies anyway.
    warnings.filterwarnings("ignore", message="The given buffer is not writable")
    torch.set_num_threads(1)


def make_loader(
    source: str,
    *,
    uris: Sequence[str],
    paths: Sequence[Path],
    endpoint: str,
    batch_size: int,
    workers: int,
    sampler: ShardSampler,
    prefetch: int,
) -> DataLoader:
    if source == "local":
        dataset: Dataset = LocalFiles(paths)
    else:
        from s3torchconnector import S3ClientConfig, S3MapDataset

        dataset = S3MapDataset.from_objects(
            list(uris), region=REGION, endpoint=endpoint, transform=s3_sample,
            s3client_config=S3ClientConfig(force_path_style=True, max_attempts=1),
        )  # fmt: skip
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=workers,
        prefetch_factor=prefetch,
        worker_init_fn=_quiet_worker,
        multiprocessing_context="fork",
        drop_last=True,
    )
