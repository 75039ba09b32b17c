"""The peer S3 servers of ../shared/peers, started and stopped through their own start.sh / stop.sh.

    p = Peer("ceph").start()     # a free port block in 9100-9199, a fresh temp DATA_DIR
    p.endpoint, p.access_key, p.secret_key
    p.pids()                     # the PIDs its start.sh wrote (DATA_DIR/*.pid): for server CPU figures
    p.stop()                     # stop.sh DATA_DIR (kills only the PIDs in DATA_DIR/*.pid), temp dir removed

`start_s` is the wall time of start.sh, which installs what is missing first (`info["installed"]`
says whether it had to); `info["up_in"]` is the script's own "up in Ns" figure (start only).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from servers import PEER_PORTS, REPO, Server, port_is_free

PEERS_DIR = Path(os.environ.get("PEERS_DIR", REPO.parent / "shared" / "peers"))
PEER_START_TIMEOUT = 900.0  # includes a first apt-get install of ceph / swift


@dataclass(frozen=True)
class PeerSpec:
    script: str  # folder under PEERS_DIR
    span: int  # ports PORT..PORT+span-1
    env: tuple[tuple[str, str], ...] = ()
    note: str = ""


PEER_SPECS: dict[str, PeerSpec] = {
    "moto": PeerSpec(
        "moto", 1, (("PYTHON", sys.executable),), "in memory, no signature/checksum checks, no fsync"
    ),
    "seaweedfs": PeerSpec(
        "seaweedfs", 8, (), "weed server (master+volume+filer+s3), 1 volume server, no replication"
    ),
    "ceph": PeerSpec(
        "ceph",
        20,
        (("CEPH_OSDS", "3"), ("CEPH_EC", "2+1")),
        "radosgw/beast, 3 bluestore OSDs, data pool erasure-coded 2+1",
    ),
    "swift": PeerSpec(
        "swift",
        5,
        (("SWIFT_DEFAULT_POLICY", "ec"),),
        "s3api, default policy EC isa_l_rs_cauchy 4+2 over 6 dirs",
    ),
    "s3rver": PeerSpec("s3rver", 1, (), "node s3rver, files, no signature checks"),
}

_reserved: set[int] = set()


def free_block(span: int) -> int:
    """First PORT in 9100-9199 with PORT..PORT+span-1 free (and not handed out here before)."""
    for base in range(PEER_PORTS.start, PEER_PORTS.stop - span + 1):
        ports = range(base, base + span)
        if any(p in _reserved for p in ports):
            continue
        if all(port_is_free(p) for p in ports):
            _reserved.update(ports)
            return base
    raise RuntimeError(f"no {span} free consecutive ports in 9100-9199")


class Peer(Server):
    def __init__(self, name: str, env: dict[str, str] | None = None) -> None:
        """`env` is added to the spec's (e.g. PYTHON for moto: which interpreter start.sh uses)."""
        super().__init__(name, "", "")
        self.spec = PEER_SPECS[name]
        self.env = dict(env or {})
        self.data: Path | None = None
        self.info["note"] = self.spec.note

    def start(self) -> Peer:
        self.tmp = Path(tempfile.mkdtemp(prefix=f"bench-peers-{self.name}-"))
        self.data = self.tmp / "data"
        self.port = free_block(self.spec.span)
        script = PEERS_DIR / self.spec.script / "start.sh"
        env = {**os.environ, **dict(self.spec.env), **self.env}
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                [str(script), str(self.port), str(self.data)],
                env=env,
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=PEER_START_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"{self.name}: start.sh did not finish in {PEER_START_TIMEOUT:.0f}s") from exc
        self.start_s = time.monotonic() - t0
        out = proc.stdout + proc.stderr
        self.log_path.write_text(out)
        if proc.returncode != 0:
            raise RuntimeError(f"{self.name}: start.sh exited {proc.returncode}:\n{out[-2000:]}")
        vals = dict(re.findall(r"^(ENDPOINT|ACCESS_KEY|SECRET_KEY)=(\S+)", out, re.M))
        self.access_key, self.secret_key = vals["ACCESS_KEY"], vals["SECRET_KEY"]
        self.info["installed"] = "yes" if "installing" in out else "no (already there)"
        m = re.search(r"^(.*) up in ([0-9.]+)s", out, re.M)
        if m:
            self.info["version"] = m.group(1).strip()
            self.info["up_in_s"] = m.group(2)
        return self

    @property
    def log_path(self) -> Path:
        assert self.tmp is not None
        return self.tmp / "start.log"

    def pids(self) -> list[int]:
        """The live PIDs named in DATA_DIR/*.pid (ceph: mon, OSDs, radosgw; the others: one)."""
        out: list[int] = []
        for f in sorted(self.data.glob("*.pid")) if self.data is not None else []:
            digits = "".join(ch for ch in f.read_text() if ch.isdigit())
            if digits and Path(f"/proc/{digits}").exists():
                out.append(int(digits))
        return out

    def stop(self) -> None:
        t0 = time.monotonic()
        if self.data is not None and self.data.exists():
            script = PEERS_DIR / self.spec.script / "stop.sh"
            try:
                subprocess.run(
                    [str(script), str(self.data)],
                    capture_output=True,
                    text=True,
                    timeout=120,
                    stdin=subprocess.DEVNULL,
                )
            except subprocess.TimeoutExpired:
                pass
            if self.name == "seaweedfs":  # weed leaves its gRPC unix sockets in the temp dir, named by port
                for port in range(self.port, self.port + self.spec.span):
                    for sock in Path(tempfile.gettempdir()).glob(f"seaweedfs-*-grpc-{port}.sock"):
                        sock.unlink(missing_ok=True)
        t1 = time.monotonic()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None
            self.data = None
        self.info["stop_s"] = f"{t1 - t0:.1f}"
        self.info["rmtree_s"] = f"{time.monotonic() - t1:.1f}"
