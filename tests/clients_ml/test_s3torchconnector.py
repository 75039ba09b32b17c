"""s3torchconnector (the AWS CRT / mountpoint-s3-client) as a training job uses it.

Datasets through a torch DataLoader with worker processes, S3Checkpoint, and
torch.distributed.checkpoint through S3StorageWriter / S3StorageReader. The DCP classes take no
endpoint argument: the CRT client reads AWS_ENDPOINT_URL from the environment (the `aws_env`
fixture sets it, as a user would export it).
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

torch = pytest.importorskip("torch")
s3torchconnector = pytest.importorskip("s3torchconnector")

from s3torchconnector import (  # noqa: E402
    S3Checkpoint,
    S3ClientConfig,
    S3IterableDataset,
    S3MapDataset,
    S3ReaderConstructor,
)
from torch.utils.data import DataLoader  # noqa: E402

from tests.conftest import REGION, ServerProcess  # noqa: E402

SAMPLES = 200
# Path-style: the endpoint is an IP address, and a bucket name is no DNS label of it.
CONFIG = S3ClientConfig(force_path_style=True, max_attempts=2)


def key_and_bytes(reader) -> tuple[str, bytes]:
    """DataLoader transform (module level: worker processes must be able to import it)."""
    return reader.key, reader.read()


def as_list(batch):
    return batch


@pytest.fixture(scope="module")
def samples(s3) -> Iterator[tuple[str, dict[str, bytes]]]:
    """~200 sample objects of assorted sizes (0 B .. 300 KiB) under one prefix, plus a decoy."""
    bucket = f"ml-samples-{os.getpid()}"
    s3.create_bucket(Bucket=bucket)
    rng = random.Random(7)
    data = {f"train/shard-{i // 50}/sample-{i:05d}.bin": rng.randbytes(rng.choice([0, 1, 100, 4096, 70_000, 300_000]))
            for i in range(SAMPLES)}  # fmt: skip
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda kv: s3.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), data.items()))
    s3.put_object(Bucket=bucket, Key="validation/not-a-sample.bin", Body=b"decoy")
    yield bucket, data
    keys = [{"Key": key} for key in [*data, "validation/not-a-sample.bin"]]
    for start in range(0, len(keys), 1000):
        s3.delete_objects(Bucket=bucket, Delete={"Objects": keys[start : start + 1000], "Quiet": True})
    s3.delete_bucket(Bucket=bucket)


def check_exactly_once(batches, expected: dict[str, bytes]) -> None:
    seen: dict[str, bytes] = {}
    for batch in batches:
        for key, body in batch:
            assert key not in seen, f"{key} delivered twice"
            seen[key] = body
    assert seen.keys() == expected.keys()
    for key, body in expected.items():
        assert hashlib.sha256(seen[key]).digest() == hashlib.sha256(body).digest(), key


def test_map_dataset_through_dataloader_workers(server: ServerProcess, aws_env, samples) -> None:
    bucket, data = samples
    dataset = S3MapDataset.from_prefix(
        f"s3://{bucket}/train/", region=REGION, endpoint=server.endpoint, s3client_config=CONFIG,
        transform=key_and_bytes,
    )  # fmt: skip
    assert len(dataset) == SAMPLES
    loader = DataLoader(dataset, batch_size=16, shuffle=True, num_workers=2, collate_fn=as_list)
    check_exactly_once(loader, data)


def test_iterable_dataset_sharded_over_workers(server: ServerProcess, aws_env, samples) -> None:
    bucket, data = samples
    dataset = S3IterableDataset.from_prefix(
        f"s3://{bucket}/train/", region=REGION, endpoint=server.endpoint, s3client_config=CONFIG,
        transform=key_and_bytes, enable_sharding=True,
    )  # fmt: skip
    loader = DataLoader(dataset, batch_size=16, num_workers=2, collate_fn=as_list)
    check_exactly_once(loader, data)


@pytest.mark.parametrize("reader", ["sequential", "range_based"])
def test_random_access_reads(server: ServerProcess, aws_env, samples, reader: str) -> None:
    bucket, data = samples
    key = next(k for k, v in data.items() if len(v) == 300_000)
    constructor = getattr(S3ReaderConstructor, reader)()
    dataset = S3MapDataset.from_objects(
        [f"s3://{bucket}/{key}"], region=REGION, endpoint=server.endpoint, s3client_config=CONFIG,
        reader_constructor=constructor,
    )  # fmt: skip
    body = data[key]
    stream = dataset[0]
    for offset, size in [(123_456, 1000), (0, 10), (299_990, 100), (50_000, 70_000)]:
        stream.seek(offset)
        assert stream.read(size) == body[offset : offset + size]
    stream.seek(-5, os.SEEK_END)
    assert stream.read() == body[-5:]


def test_s3checkpoint_save_and_load(server: ServerProcess, aws_env, bucket: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 32)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 3}

    checkpoint = S3Checkpoint(region=REGION, endpoint=server.endpoint, s3client_config=CONFIG)
    uri = f"s3://{bucket}/checkpoints/epoch-3.pt"
    with checkpoint.writer(uri) as writer:
        torch.save(state, writer)
    with checkpoint.reader(uri) as reader:
        loaded = torch.load(reader, weights_only=True)

    assert loaded["epoch"] == 3
    for name, tensor in state["model"].items():
        assert torch.equal(loaded["model"][name], tensor), name
    restored = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    restored.load_state_dict(loaded["model"])
    x = torch.randn(2, 32)
    assert torch.equal(restored(x), model(x))


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_distributed_checkpoint_with_endpoint_from_environment(
    server: ServerProcess, aws_env, bucket: str
) -> None:
    import torch.distributed.checkpoint as dcp
    from s3torchconnector.dcp import S3StorageReader, S3StorageWriter

    assert os.environ["AWS_ENDPOINT_URL"] == server.endpoint  # the only endpoint setting DCP gets
    torch.manual_seed(1)
    state = {
        "weights": torch.randn(256, 256),  # 256 KiB
        "embedding": torch.randn(5000, 512),  # 10 MiB: more than one 8 MiB part of a multipart upload
        "steps": torch.arange(1000),
        "meta": {"epoch": 5, "lr": 0.001},
    }
    path = f"s3://{bucket}/dcp/epoch-5"
    dcp.save(
        state,
        storage_writer=S3StorageWriter(region=REGION, path=path, s3client_config=CONFIG, thread_count=2),
    )

    target = {
        "weights": torch.zeros(256, 256),
        "embedding": torch.zeros(5000, 512),
        "steps": torch.zeros(1000, dtype=torch.int64),
        "meta": {"epoch": 0, "lr": 0.0},
    }
    dcp.load(target, storage_reader=S3StorageReader(region=REGION, path=path, s3client_config=CONFIG))
    for name in ("weights", "embedding", "steps"):
        assert torch.equal(target[name], state[name]), name
    assert target["meta"] == {"epoch": 5, "lr": 0.001}
