"""server/config.py: one validated model for file, environment and defaults; typos are refused.

Each bad configuration must stop the server with where the problem is (file:line or the variable),
the key, and the keys that would be valid there. `tierstore serve` and `tierstore config check` are
also run as real processes.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

import server.config
from server.cli import main as tierstore_main
from server.config import DEFAULT_TIERS, TIER_KINDS, ConfigError, Settings, load_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No TIERSTORE_* variable of the caller's shell leaks into a test."""
    for name in list(os.environ):
        if name.startswith("TIERSTORE_"):
            monkeypatch.delenv(name)
    yield


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tierstore.toml"
    path.write_text(text)
    return path


def refusal(path: Path | None = None, **flags: object) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(path, **flags)  # type: ignore[arg-type]
    return str(caught.value)


@pytest.mark.parametrize(
    ("text", "line", "key", "valid"),
    [
        ('[server]\nlistne = "127.0.0.1:9100"\n', 2, "server.listne", "listen"),
        (
            "[lifecycle]\nenabled = true\ninterval_second = 30\n",
            3,
            "lifecycle.interval_second",
            "interval_seconds",
        ),
        ('[tiers.hot]\nk = 2\nspread_levl = "node"\n', 3, "tiers.hot.spread_levl", "spread_level"),
        ("# durability\n[catalog]\ndurabel = false\n", 3, "catalog.durabel", "durable"),
        ("[catalog]\ndurable = false\n[sever]\nlisten = 1\n", 3, "sever", "server"),
        (
            "[tiers.gpu-direct]\nk = 4\n",
            2,
            "tiers.gpu-direct.k",
            "cache_bytes",
        ),  # an erasure key on a memory tier
        (
            "lifecycle.interval_second = 30\n",
            1,
            "lifecycle.interval_second",
            "interval_seconds",
        ),  # a dotted key
    ],
)
def test_a_typo_in_the_file_is_refused_with_its_line_and_the_valid_keys(
    tmp_path: Path, text: str, line: int, key: str, valid: str
) -> None:
    path = write(tmp_path, text)
    message = refusal(path)
    assert f"{path}:{line}: unknown key {key}" in message, message
    valid_keys = re.search(r"valid keys: (.*)", message)
    assert valid_keys and valid in valid_keys.group(1).split(", "), message


def test_a_misspelled_value_is_refused_not_read_as_false(tmp_path: Path) -> None:
    # The old reader took any string but "1/true/yes/on" as false: `durable = "flase"` meant no fsync.
    message = refusal(write(tmp_path, '[catalog]\ndurable = "flase"\n'))
    assert "catalog.durable" in message and "'flase'" in message, message


@pytest.mark.parametrize(
    ("text", "line", "key", "got"),
    [
        ('[tiers.hot]\nbackend = "erasure"\nk = "four"\n', 3, "tiers.hot.k", "'four'"),
        ('[server]\naccess_log = "maybe"\n', 2, "server.access_log", "'maybe'"),
        ("[lifecycle]\ninterval_seconds = -1\n", 2, "lifecycle.interval_seconds", "-1"),
        ('[tiers.cold]\nbackend = "s3"\nbucket = "b"\npart_size = 1024\n', 4, "tiers.cold.part_size", "1024"),
        ('[tiers.warm]\nspread_level = "datacenter"\n', 2, "tiers.warm.spread_level", "'datacenter'"),
        ("[tiers.hot]\npack_threshold_bytes = -1\n", 2, "tiers.hot.pack_threshold_bytes", "-1"),
        ("[tiers.hot]\npack_threshold_bytes = 2097152\n", 2, "tiers.hot.pack_threshold_bytes", "2097152"),
        ('[server]\ntrusted_proxies = ["haproxy"]\n', 2, "server.trusted_proxies", "'haproxy'"),
    ],
)
def test_a_wrong_type_or_value_is_refused(tmp_path: Path, text: str, line: int, key: str, got: str) -> None:
    path = write(tmp_path, text)
    message = refusal(path)
    assert f"{path}:{line}: {key}: " in message and got in message, message


def test_unknown_tier_and_backend_kind_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, '[tiers.hto]\nk = 3\n\n[tiers.warm]\nbackend = "tape"\n')
    message = refusal(path)
    assert f"{path}:1: tiers.hto: " in message and "'gpu-direct', 'hot', 'warm' or 'cold'" in message, message
    assert f"{path}:4: tiers.warm: " in message and "'erasure', 'files', 'memory', 's3'" in message, message
    assert "2 problems" in message  # the unknown tier's contents are not a second complaint


def test_an_s3_tier_needs_a_bucket(tmp_path: Path) -> None:
    path = write(tmp_path, '[tiers.cold]\nbackend = "s3"\nendpoint = "http://127.0.0.1:1"\n')
    assert f"{path}:1: tiers.cold.bucket: Field required" in refusal(path)


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    message = refusal(write(tmp_path, '[server]\nlistne = "x"\n[lifecycle]\ninterval_second = 1\n'))
    assert "2 problems" in message and "server.listne" in message and "lifecycle.interval_second" in message


def test_environment_overrides_the_file_and_flags_override_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        '[server]\nlisten = "127.0.0.1:9100"\n[lifecycle]\ninterval_seconds = 30\n'
        "[tiers.hot]\nk = 2\nm = 1\n",
    )
    monkeypatch.setenv("TIERSTORE_LIFECYCLE_INTERVAL_SECONDS", "5")
    monkeypatch.setenv("TIERSTORE_TIERS_HOT_K", "3")
    monkeypatch.setenv("TIERSTORE_TIERS_GPU_DIRECT_CAPACITY_BYTES", "1000")
    monkeypatch.setenv("TIERSTORE_SERVER_VIRTUAL_HOST_DOMAINS", "localhost, s3.internal")
    monkeypatch.setenv("TIERSTORE_SERVER_LISTEN", "127.0.0.1:9200")
    monkeypatch.setenv("TIERSTORE_CATALOG_DURABLE", "false")
    monkeypatch.setenv("TIERSTORE_ACCESS_KEY", "shortcut-key")
    monkeypatch.setenv("TIERSTORE_CREDENTIALS_ACCESS_KEY", "long-form-key")
    monkeypatch.setenv("TIERSTORE_TIERS_COLD_DOMAINS", f'[{{"id": "c1", "path": "{tmp_path / "c1"}"}}]')
    config = load_config(path)
    assert config.lifecycle.interval_seconds == 5.0
    tiers = {t.name: t for t in config.tiers}
    assert (tiers["hot"].options["k"], tiers["hot"].options["m"]) == (
        3,
        1,
    )  # env over file, file over default
    assert tiers["gpu-direct"].capacity_bytes == 1000
    assert tiers["cold"].options["domains"] == [  # JSON for a list of tables
        {"id": "c1", "path": str(tmp_path / "c1"), "rack": "rack1", "zone": "zone1", "weight": 0.0}
    ]
    assert config.virtual_host_domains == ["localhost", "s3.internal"]
    assert config.listen == "127.0.0.1:9200" and config.catalog_durable is False
    assert config.access_key == "shortcut-key"
    assert load_config(path, listen="127.0.0.1:9300", data_dir=tmp_path / "d").listen == "127.0.0.1:9300"


def test_a_bad_environment_value_or_name_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TIERSTORE_TIERS_HOT_K", "four")
    monkeypatch.setenv("TIERSTORE_LIFECYCLE_INTERVAL_SECOND", "5")
    monkeypatch.setenv("TIERSTORE_TIERS_COLD_SPREAD_LEVL", "node")
    message = refusal()
    assert "environment TIERSTORE_TIERS_HOT_K: tiers.hot.k: " in message and "'four'" in message, message
    assert (
        "environment TIERSTORE_LIFECYCLE_INTERVAL_SECOND: unknown key lifecycle.interval_second "
        "(did you mean 'interval_seconds'?)"
    ) in message, message
    assert "environment TIERSTORE_TIERS_COLD_SPREAD_LEVL: unknown key tiers.cold.spread_levl" in message


def test_other_programs_variables_do_not_stop_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TIERSTORE_ENDPOINT", "TIERSTORE_RETIRE_GRACE_SECONDS", "TIERSTORE_SUPERVISOR_PID"):
        monkeypatch.setenv(name, "1")
    assert load_config().warnings == []
    monkeypatch.setenv("TIERSTORE_SOMETHING_ELSE", "1")  # no section of ours: perhaps another tool's
    assert load_config().warnings == [
        "environment variable TIERSTORE_SOMETHING_ELSE is not a configuration key (ignored)"
    ]


def test_the_catalog_url_from_flag_environment_or_file_is_validated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load_config().catalog_url == ""  # the SQLite file in the data directory
    monkeypatch.setenv("TIERSTORE_CATALOG_URL", "postgresql://ts:pw@db.example:5432/tierstore")
    assert load_config().catalog_url == "postgresql://ts:pw@db.example:5432/tierstore"
    assert load_config(catalog_url="sqlite:///cat.db").catalog_url == "sqlite:///cat.db"  # the flag wins
    monkeypatch.setenv("TIERSTORE_CATALOG_URL", "mysql://db/x")
    assert "environment TIERSTORE_CATALOG_URL: catalog.url: " in refusal()
    monkeypatch.delenv("TIERSTORE_CATALOG_URL")
    assert "command line --catalog: catalog.url: " in refusal(catalog_url="postgresql://host-without-db")
    config_file = tmp_path / "t.toml"
    config_file.write_text('[catalog]\nurl = "postgresql://h:notaport/db"\n')
    assert "bad port" in refusal(config_file)


def test_node_tls_keys_and_the_node_ca_are_validated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    assert load_config().node_ca == ""  # the system store
    assert load_config(write(tmp_path, f'[cluster]\nnode_ca = "{ca}"\n')).node_ca == str(ca)
    assert load_config(node_ca=str(ca)).node_ca == str(ca)  # --node-ca
    assert "command line --node-ca: cluster.node_ca: " in refusal(node_ca=str(tmp_path / "nope.pem"))
    assert "no CA bundle file" in refusal(write(tmp_path, '[cluster]\nnode_ca = "/nonexistent/ca.pem"\n'))
    # TIERSTORE_NODE_CA is read where the gateway places tiers on nodes, and is no unknown key.
    monkeypatch.setenv("TIERSTORE_NODE_CA", str(ca))
    assert not load_config().warnings
    # [node]: a storage node's own keys; both or neither.
    assert "set both tls_cert and tls_key" in refusal(write(tmp_path, f'[node]\ntls_cert = "{ca}"\n'))
    assert "node.tls_kye" in refusal(write(tmp_path, f'[node]\ntls_cert = "{ca}"\ntls_kye = "{ca}"\n'))


def test_a_bad_flag_is_named(tmp_path: Path) -> None:
    assert "command line --listen: server.listen: listen address must be HOST:PORT" in refusal(
        listen="1.2.3.4"
    )


def test_defaults_are_the_embedded_tiers_under_data_dir(tmp_path: Path) -> None:
    config = load_config(None, data_dir=tmp_path)
    assert [t.name for t in config.tiers] == list(DEFAULT_TIERS)
    hot = next(t for t in config.tiers if t.name == "hot")
    assert hot.backend == "erasure" and hot.options["root"] == str(tmp_path / "domains")
    assert {k: hot.options[k] for k in ("k", "m", "nodes", "drives_per_node")} == {
        "k": 4,
        "m": 2,
        "nodes": 8,
        "drives_per_node": 2,
    }
    # Small shards go to pack files on every erasure-coded tier unless a tier says 0.
    erasure_tiers = [t for t in config.tiers if t.backend == "erasure"]
    assert [t.name for t in erasure_tiers] == ["hot", "warm", "cold"]
    assert all(t.options["pack_threshold_bytes"] == 512 * 1024 for t in erasure_tiers)
    assert config.catalog_path == tmp_path / "catalog" / "catalog.db"
    assert (
        config.header_timeout_seconds,
        config.body_idle_timeout_seconds,
        config.keep_alive_timeout_seconds,
        config.max_connections,
        config.metrics_per_bucket,
    ) == (10, 60, 30, 1024, False)
    assert (
        config.drives.reserve_bytes,
        config.drives.failing_after_errors,
        config.drives.reprobe_seconds,
    ) == (1073741824, 3, 10)


def test_a_tier_with_another_backend_replaces_the_default_table(tmp_path: Path) -> None:
    path = write(
        tmp_path, '[tiers.cold]\nbackend = "s3"\nbucket = "archive"\n[tiers.warm]\nenabled = false\n'
    )
    tiers = {t.name: t for t in load_config(path).tiers}
    assert "warm" not in tiers
    assert (
        tiers["cold"].backend == "s3" and "k" not in tiers["cold"].options
    )  # nothing of the erasure default


def documented_example() -> str:
    doc = server.config.__doc__ or ""
    block = doc.split("Example (every key optional):", 1)[1].split("\nA [tiers.NAME]", 1)[0]
    return "\n".join(line[4:] for line in block.splitlines())


def test_the_documented_example_is_valid_and_complete(tmp_path: Path) -> None:
    example = documented_example()
    load_config(write(tmp_path, example))  # true: it loads
    parsed = tomllib.loads(example)
    for section, model in server.config.SECTIONS.items():  # complete: every key is there
        assert set(parsed[section]) == set(model.model_fields), section
    documented = {key for table in parsed["tiers"].values() for key in table}
    documented |= {"domains"} if "# domains = [" in example else set()
    assert documented == {key for kind in TIER_KINDS.values() for key in kind.model_fields}
    assert set(parsed) == set(Settings.model_fields) - {"config_file"}


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = tierstore_main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_config_check_prints_the_effective_configuration_with_secrets_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        '[credentials]\nsecret_key = "file-secret"\n[tiers.cold]\nbackend = "s3"\n'
        'bucket = "archive"\nsecret_key = "remote-secret"\n',
    )
    monkeypatch.setenv("TIERSTORE_LIFECYCLE_MOVER_CONCURRENCY", "7")
    code, out, err = run_cli("config", "check", str(path))
    assert code == 0, err
    assert "file-secret" not in out and "remote-secret" not in out
    effective = tomllib.loads(out)  # the output is itself a configuration file
    assert effective["credentials"]["secret_key"] == "********"
    assert effective["lifecycle"]["mover_concurrency"] == 7  # the environment
    assert effective["tiers"]["cold"]["bucket"] == "archive"  # the file
    assert effective["tiers"]["hot"]["k"] == 4 and effective["server"]["max_connections"] == 1024  # defaults


def test_config_check_prints_the_errors_and_exits_2(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\nlistne = 1\n")
    code, out, err = run_cli("config", "check", str(path))
    assert code == 2 and out == ""
    assert f"{path}:2: unknown key server.listne (did you mean 'listen'?); valid keys: listen" in err


def test_serve_refuses_a_bad_file_with_exit_2_and_no_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, '[server]\nlistne = "127.0.0.1:1"\n[tiers.hot]\nk = "four"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERSTORE_")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "server.cli",
            "serve",
            "--config",
            str(path),
            "--data",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert f"{path}:2: unknown key server.listne" in done.stderr
    assert f"{path}:4: tiers.hot.k: " in done.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was created


def test_encryption_keys_are_validated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    short = tmp_path / "short.key"
    short.write_text("c2hvcnQ=\n")  # 5 bytes
    assert "32 bytes" in refusal(write(tmp_path, f'[encryption]\nmaster_key_file = "{short}"\n'))
    assert "cannot read" in refusal(
        write(tmp_path, f'[encryption]\nmaster_key_file = "{tmp_path / "none"}"\n')
    )
    monkeypatch.delenv("TS_TEST_MASTER", raising=False)
    assert "not set" in refusal(write(tmp_path, '[encryption]\nmaster_key_env = "TS_TEST_MASTER"\n'))
    good = tmp_path / "good.key"
    good.write_text("ab" * 32)
    text = f'[encryption]\nmaster_key_file = "{good}"\nmaster_key_env = "TS_TEST_MASTER"\n'
    monkeypatch.setenv("TS_TEST_MASTER", "cd" * 32)
    assert "not both" in refusal(write(tmp_path, text))
    config = load_config(
        write(tmp_path, f'[encryption]\nmaster_key_file = "{good}"\nkms_key_ids = ["a", "b"]\n')
    )
    assert config.encryption_keys.master_key_file == str(good)
    assert config.encryption_keys.kms_key_ids == ["a", "b"] and not config.encryption_allow_sse_c_over_http
