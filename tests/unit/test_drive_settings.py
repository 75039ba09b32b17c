"""The `[drives]` config table: defaults, TOML, environment, validation, and how it reaches the pools."""

from __future__ import annotations

from pathlib import Path

import pytest

from erasure.drive_health import DriveHealthSettings
from server.config import load_config


def test_defaults_and_toml_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_config(None, data_dir=tmp_path).drives == DriveHealthSettings(1 << 30, 3, 10.0)
    toml = tmp_path / "tierstore.toml"
    toml.write_text("[drives]\nreserve_bytes = 4096\nfailing_after_errors = 5\n")
    monkeypatch.setenv("TIERSTORE_DRIVES_REPROBE_SECONDS", "2.5")
    cfg = load_config(toml, data_dir=tmp_path)
    assert cfg.drives == DriveHealthSettings(reserve_bytes=4096, failing_after_errors=5, reprobe_seconds=2.5)
    # Every erasure-coded tier's pool gets them; other backends do not.
    assert {t.name: t.options.get("drive_health") for t in cfg.tiers} == {
        "gpu-direct": None,
        "hot": cfg.drives,
        "warm": cfg.drives,
        "cold": cfg.drives,
    }


@pytest.mark.parametrize(
    "table", ["reserve_bytes = -1", "failing_after_errors = 0", "reprobe_seconds = 0", "reserve = 10"]
)
def test_bad_values_and_unknown_keys_are_refused(tmp_path: Path, table: str) -> None:
    toml = tmp_path / "tierstore.toml"
    toml.write_text(f"[drives]\n{table}\n")
    with pytest.raises(ValueError, match="drives"):
        load_config(toml, data_dir=tmp_path)
