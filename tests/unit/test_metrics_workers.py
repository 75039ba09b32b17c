"""A worker's multi-process metric values know their process without asking the kernel each time,
and still give a forked child files of its own (server/metrics_workers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Run in a process of its own: prometheus_client picks its value class when first imported, from
# the environment, and a test process has imported it long before.
SCRIPT = textwrap.dedent(
    """
    import os

    from server import metrics_workers
    from prometheus_client import Counter, CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    counter = Counter("tierstore_test_things", "things", ["kind"])
    counter.labels("a").inc(5)
    counter.labels("a").inc(2)
    child = os.fork()
    if child == 0:
        try:
            counter.labels("a").inc(3)  # the child's own files, not its parent's
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    counter.labels("a").inc(1)
    metrics_workers._pid = 4_000_000_001  # what the values take for this process: the remembered id
    counter.labels("b").inc(1)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=os.environ["PROMETHEUS_MULTIPROC_DIR"])
    print(registry.get_sample_value("tierstore_test_things_total", {"kind": "a"}))
    print(child)
    """
)


def _run(script: str, metrics_dir: Path) -> list[str]:
    """What `script` prints, run as a worker with `metrics_dir` as its shared metrics directory."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.split()


def test_values_know_their_process_and_a_fork_gets_its_own_files(tmp_path: Path) -> None:
    out = _run(SCRIPT, tmp_path)
    total, child = float(out[0]), int(out[1])
    assert total == 11.0  # 5 + 2 + 1 in the parent, 3 in the child: none lost or counted twice
    assert (tmp_path / f"counter_{child}.db").exists()
    # An update asks the remembered id, not the kernel (os.getpid, a system call each time).
    assert (tmp_path / "counter_4000000001.db").exists()


# A metric made before server.metrics_workers is imported (a module-level metric somewhere, one
# day) keeps the value class it was made with, which maps the process's file too: nothing either
# class writes may land on the other's values. (prometheus_client makes a labelled child with the
# class current then, so only values made before the import stay with the first class.)
EARLY_SCRIPT = textwrap.dedent(
    """
    import os

    from prometheus_client import Counter, CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    early = Counter("tierstore_early", "made before the import", ["k"])
    early.labels("a").inc(1)
    from server import metrics_workers  # noqa: F401
    later = Counter("tierstore_later", "made after it", ["k"])
    later.labels("b").inc(2)
    early.labels("c").inc(3)  # a new key in the same file, written by the first class
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=os.environ["PROMETHEUS_MULTIPROC_DIR"])
    for name, k in (("tierstore_early_total", "a"), ("tierstore_later_total", "b"), ("tierstore_early_total", "c")):
        print(registry.get_sample_value(name, {"k": k}))
    """
)


def test_values_made_before_the_import_and_after_it_all_count(tmp_path: Path) -> None:
    out = _run(EARLY_SCRIPT, tmp_path)
    assert [float(v) for v in out] == [1.0, 2.0, 3.0]
