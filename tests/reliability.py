"""Reliability figures of a test run, written to tests/RELIABILITY.md at the end of the session.

Fault, soak and trial tests take the `reliability` fixture and report what they did: inputs
tried, faults injected, operations served, objects verified, objects lost. A test that records a
lost object fails (nothing acknowledged may ever be lost). At the end of the session the totals of
the tests that reported, per test family (module), are written to tests/RELIABILITY.md with the
date, the commit and the list of what ran — whatever subset ran (a `-k` run writes its own
figures and says which tests they come from). A session where no such test ran leaves the file
alone, so an unrelated run never erases the figures.
"""

from __future__ import annotations

import subprocess
from collections.abc import Generator, Iterator
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path

import pytest

REPORT = Path(__file__).with_name("RELIABILITY.md")
CALL_REPORT = pytest.StashKey[pytest.TestReport]()
PROPERTY = "tierstore-reliability"  # the user property of a test's report that carries its figures


@dataclass
class Tally:
    inputs: int = 0  # distinct inputs tried (objects, sizes, seeds, trials)
    faults: int = 0  # faults injected (kills, offline domains, deleted/corrupted files)
    operations: int = 0  # requests the server answered
    verified: int = 0  # objects read back and compared with what was acknowledged
    lost: int = 0  # acknowledged objects not readable byte-exact: must stay 0

    def add(self, other: Tally) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class Recorder:
    """What one test reports; `lost` entries also fail the test."""

    nodeid: str
    tally: Tally = field(default_factory=Tally)
    losses: list[str] = field(default_factory=list)

    def record(self, *, inputs: int = 0, faults: int = 0, operations: int = 0, verified: int = 0) -> None:
        self.tally.add(Tally(inputs, faults, operations, verified))

    def lost(self, what: str) -> None:
        self.tally.lost += 1
        self.losses.append(what)


class ReliabilityPlugin:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.recorders: list[tuple[Recorder, str]] = []  # with the test's outcome

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        for name, value in report.user_properties:
            if name == PROPERTY and isinstance(value, dict):
                tally = Tally(**{f.name: value[f.name] for f in fields(Tally)})
                self.recorders.append((Recorder(value["nodeid"], tally), value["outcome"]))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if report.when == "call":
            item.stash[CALL_REPORT] = report  # the fixture's teardown reads the test's outcome
        return report

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.recorders or hasattr(self.config, "workerinput"):  # nothing ran, or an xdist worker
            return
        REPORT.write_text(self.render())

    def render(self) -> str:
        families: dict[str, tuple[Tally, int]] = {}
        for recorder, _ in self.recorders:
            family = recorder.nodeid.split("::")[0].removeprefix("tests/").removesuffix(".py")
            tally, tests = families.get(family, (Tally(), 0))
            tally.add(recorder.tally)
            families[family] = (tally, tests + 1)
        total = Tally()
        for tally, _ in families.values():
            total.add(tally)
        soak = bool(self.config.getoption("--soak", False))
        lines = [
            "# Reliability figures",
            "",
            "Written by the test suite (`tests/reliability.py`) at the end of a pytest run: do not edit by hand.",
            "Each family is a test module; its tests report what they tried through the `reliability` fixture.",
            "A test that loses an acknowledged object fails, so *lost* is 0 in any run that passed.",
            "Longer runs: `--soak` (or TIERSTORE_KILL9_TRIALS=N, TIERSTORE_SOAK_SECONDS=S).",
            "",
            f"- run: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {_commit()}, soak: {'yes' if soak else 'no'}",
            f"- tests that reported: {len(self.recorders)}",
            "",
            "| family | tests | inputs tried | faults injected | operations served | objects verified | lost |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for family, (tally, tests) in sorted(families.items()):
            lines.append(
                f"| {family} | {tests} | {tally.inputs} | {tally.faults} | {tally.operations} "
                f"| {tally.verified} | {tally.lost} |"
            )
        lines.append(
            f"| **total** | {len(self.recorders)} | {total.inputs} | {total.faults} | {total.operations} "
            f"| {total.verified} | {total.lost} |"
        )
        lines += ["", "## What ran", ""]
        ran = sorted(self.recorders, key=lambda ran: ran[0].nodeid)  # processes finish in any order
        lines += [f"- `{recorder.nodeid}`: {outcome}" for recorder, outcome in ran]
        return "\n".join(lines) + "\n"


def _commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=REPORT.parent,
            timeout=10,
            check=True,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            cwd=REPORT.parent,
            timeout=10,
        ).stdout.splitlines()
        dirty = [line for line in changed if not line.endswith(REPORT.name)]  # this file is not the code
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{' (with local changes)' if dirty else ''}"


def register(config: pytest.Config) -> None:
    config.pluginmanager.register(ReliabilityPlugin(config), "tierstore-reliability")


@pytest.fixture
def reliability(request: pytest.FixtureRequest) -> Iterator[Recorder]:
    """Report inputs, faults, operations, verified and lost objects for tests/RELIABILITY.md."""
    recorder = Recorder(request.node.nodeid)
    yield recorder
    call = request.node.stash.get(CALL_REPORT, None)
    outcome = "passed" if call is not None and call.passed else ("failed" if call is not None else "error")
    if recorder.losses:
        outcome = "failed"
    # Through the test's report, which reaches the process that writes the file: with xdist, the
    # controller (tests run in its workers; the reports alone come back to it).
    request.node.user_properties.append(
        (PROPERTY, {"nodeid": recorder.nodeid, "outcome": outcome, **asdict(recorder.tally)})
    )
    if recorder.losses:
        pytest.fail(f"{len(recorder.losses)} acknowledged object(s) lost: {recorder.losses[:10]}")
