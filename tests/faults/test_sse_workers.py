"""Encryption at rest with several worker processes on one data directory: they share the first
master key (made once, under a lock), and a rotation in one worker is seen by the others."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import ServerProcess, catalog_query, free_port, make_client
from tests.support import admin


def test_workers_share_master_keys_and_rotation(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc = ServerProcess(
        data,
        free_port(),
        extra_args=["--workers", "2"],
        env={"TIERSTORE_ENCRYPTION_KMS_KEY_IDS": "shared-kms"},
    ).start()
    try:
        assert len(list((data / "encryption" / "master-keys").glob("*.key"))) == 1
        bodies: dict[str, bytes] = {}

        def put(name: str, body: bytes) -> None:
            bodies[name] = body  # a new client (connection) each time: both workers take some
            make_client(proc.endpoint).put_object(
                Bucket="workers", Key=name, Body=body, ServerSideEncryption="AES256"
            )

        make_client(proc.endpoint).create_bucket(Bucket="workers")
        for i in range(16):
            put(f"before-{i}", os.urandom(1000 + i * 9000))
        kms = make_client(proc.endpoint).put_object(
            Bucket="workers", Key="kms", Body=b"k", ServerSideEncryption="aws:kms", SSEKMSKeyId="shared-kms"
        )
        assert kms["SSEKMSKeyId"] == "shared-kms"
        first = admin(proc.endpoint, "encryption", "rotate")
        assert first["rewrapped"] == 16
        for i in range(16):
            put(f"after-{i}", os.urandom(3000))
        for name, body in bodies.items():
            assert make_client(proc.endpoint).get_object(Bucket="workers", Key=name)["Body"].read() == body, (
                name
            )
        assert make_client(proc.endpoint).get_object(Bucket="workers", Key="kms")["Body"].read() == b"k"
        # Whichever worker wrote them, the objects after the rotation used the new key.
        kids = {
            json.loads(meta)["enc"]["kid"]
            for (key, meta) in catalog_query(data, "SELECT key, meta FROM objects")
            if key.startswith("after-")
        }
        assert kids == {first["current_key_id"]}
    finally:
        proc.stop()
