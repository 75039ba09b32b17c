"""The catalog's multipart rows: racing parts, the memory of completed uploads, older catalogs."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from tiering.backend import StoredData
from tiering.catalog import Catalog
from tiering.records import ObjectMeta, ObjectRecord, PartRecord, Segment, UploadRecord

FAR_FUTURE = time.time() + 10 * 365 * 86400  # every retired blob is due for deletion by then


def _catalog(tmp_path: Path) -> tuple[Catalog, UploadRecord]:
    catalog = Catalog(tmp_path / "c.db", durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    upload = UploadRecord("up", "b", "k", 1.0, "hot", ObjectMeta(), "CRC32", "owner", "FULL_OBJECT")
    catalog.create_upload(upload)
    return catalog, upload


def _part(number: int, ended: float, data_id: str) -> PartRecord:
    return PartRecord(number, 10, f"etag-{data_id}", ended, StoredData(data_id, 10, {}), None)


def _garbage(catalog: Catalog) -> set[str]:
    return {stored.data_id for _, stored in catalog.due_garbage(FAR_FUTURE, limit=10_000)}


def test_the_part_whose_body_ended_last_wins_whichever_commits_last(tmp_path: Path) -> None:
    catalog, upload = _catalog(tmp_path)
    assert catalog.put_part("up", _part(1, 20.0, "later"))
    # An upload of the same number whose body had ended earlier commits after it: it loses, and
    # its data is retired at once, never left behind.
    assert not catalog.put_part("up", _part(1, 10.0, "earlier"))
    assert [p.stored.data_id for p in catalog.list_parts("up")] == ["later"]
    assert _garbage(catalog) == {"earlier"}
    assert catalog.is_referenced("later")
    # A newer one replaces it; the replaced data is retired, the live one never is.
    assert catalog.put_part("up", _part(1, 30.0, "newest"))
    assert [p.stored.data_id for p in catalog.list_parts("up")] == ["newest"]
    assert _garbage(catalog) == {"earlier", "later"}


def test_racing_parts_leave_one_live_part_and_retire_every_other(tmp_path: Path) -> None:
    catalog, upload = _catalog(tmp_path)
    ids = [f"blob-{n}" for n in range(40)]
    start = threading.Barrier(8)

    def put(mine: list[str]) -> None:
        start.wait()
        for data_id in mine:
            catalog.put_part("up", _part(1, float(ids.index(data_id)), data_id))

    threads = [threading.Thread(target=put, args=(ids[n::8],)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    live = [p.stored.data_id for p in catalog.list_parts("up")]
    assert live == [ids[-1]]  # the one whose body ended last
    assert _garbage(catalog) == set(ids) - set(live)


def test_completed_upload_is_remembered_until_forgotten(tmp_path: Path) -> None:
    catalog, upload = _catalog(tmp_path)
    catalog.put_part("up", _part(1, 1.0, "p1"))
    record = ObjectRecord(
        "b", "k", 10, "abc-1", 5.0, "hot", ObjectMeta(), (Segment(StoredData("p1", 10, {}), 1, "etag-p1"),)
    )
    catalog.complete_upload(upload, record, requested=[(1, "etag-p1")])
    replay = catalog.completed_upload("b", "k", "up", [(1, "etag-p1")])
    assert replay is not None and (replay.etag, replay.last_modified) == ("abc-1", 5.0)
    assert catalog.completed_upload("b", "k", "up", [(1, "other")]) is None
    assert catalog.forget_completed_uploads(time.time() - 3600) == 0  # not old enough yet
    assert catalog.forget_completed_uploads(time.time() + 1) == 1
    assert catalog.completed_upload("b", "k", "up", [(1, "etag-p1")]) is None


def test_an_older_catalog_gains_the_checksum_type_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    # The uploads table as catalogs made before checksum types had it, with an upload in flight.
    db.execute("""CREATE TABLE uploads (upload_id TEXT PRIMARY KEY, bucket TEXT NOT NULL, key TEXT NOT NULL,
                  initiated REAL NOT NULL, tier TEXT NOT NULL, meta TEXT NOT NULL, tags TEXT NOT NULL,
                  checksum_algorithm TEXT, owner TEXT NOT NULL)""")
    db.execute("INSERT INTO uploads VALUES ('old', 'b', 'k', 1.0, 'hot', '{}', '{}', 'CRC32', 'owner')")
    db.commit()
    db.close()
    catalog = Catalog(path, durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    old = catalog.get_upload("b", "k", "old")
    assert (old.checksum_algorithm, old.checksum_type) == ("CRC32", None)  # completes COMPOSITE, as before
    catalog.create_upload(
        UploadRecord("new", "b", "k", 2.0, "hot", ObjectMeta(), "CRC32", "owner", "FULL_OBJECT")
    )
    assert catalog.get_upload("b", "k", "new").checksum_type == "FULL_OBJECT"
    Catalog(path, durable=False).close()  # opening it again changes nothing


def test_upload_ids_never_start_with_a_dash() -> None:
    """aws-cli cannot take `--upload-id -AXR...` (argparse reads it as an option): seen in CI, where
    `aws s3api upload-part` exited 2 for one upload in 64. 5,000 ids: without the rule about 78
    would start with "-"."""
    from tiering.store import new_upload_id

    ids = [new_upload_id() for _ in range(5000)]
    assert not [i for i in ids if i.startswith("-")]
    assert len(set(ids)) == len(ids) and all(len(i) == 32 for i in ids)
