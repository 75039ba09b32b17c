"""nginx (Debian package) as the ceiling of this machine: static-file GET and WebDAV PUT on loopback.

    from nginx import Nginx
    n = Nginx(workers=2).start()       # foreground `nginx -g 'daemon off;'` on a free port in 9100-9199
    n.root / "bucket" / "key"          # files under root are served by GET /bucket/key
    ... PUT /bucket/other-key          # WebDAV PUT writes root/bucket/other-key (create_full_put_path)
    n.stop()                           # TERM (QUIT-like graceful), KILL after 20 s; temp prefix removed

Everything lives in a temp prefix: nginx.conf, pid, error log, the client-body temp dir and the
static root. No file under /etc or /var is read or written (every compiled-in temp path is
overridden). `sendfile on`, `tcp_nodelay on`, no access log, keep-alive without a request cap.
A WebDAV PUT is written by nginx to client_body_temp_path, then renamed into place: no fsync.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from servers import PEER_PORTS, Server, free_port

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

CONF = """\
user root;
worker_processes {workers};
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 600s;
    keepalive_requests 100000000;
    client_max_body_size 0;
    client_body_buffer_size 128k;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        root {prefix}/root;
        location / {{
            dav_methods PUT DELETE;
            create_full_put_path on;
            dav_access user:rw;
        }}
    }}
}}
"""


def nginx_version() -> str:
    try:
        out = subprocess.run([NGINX, "-v"], capture_output=True, text=True, timeout=10)
    except OSError:
        return ""
    return (out.stderr or out.stdout).strip().removeprefix("nginx version: ")


class Nginx(Server):
    """nginx in the foreground, own prefix; the bench treats /BUCKET/KEY as a file path."""

    def __init__(self, workers: int | None = None) -> None:
        super().__init__("nginx", "", "")
        self.workers = workers or (os.cpu_count() or 1)

    @property
    def root(self) -> Path:
        assert self.tmp is not None
        return self.tmp / "root"

    def pick_port(self) -> int:
        return free_port(PEER_PORTS)

    def command(self) -> list[str]:
        assert self.tmp is not None
        prefix = self.tmp
        for d in ("root", "tmp/body", "tmp/proxy", "tmp/fastcgi", "tmp/uwsgi", "tmp/scgi"):
            (prefix / d).mkdir(parents=True, exist_ok=True)
        conf = prefix / "nginx.conf"
        conf.write_text(CONF.format(workers=self.workers, prefix=prefix, port=self.port))
        return [
            NGINX,
            "-p",
            str(prefix),
            "-c",
            str(conf),
            "-e",
            str(prefix / "error.log"),
            "-g",
            "daemon off;",
        ]

    def ready(self) -> bool:
        (self.root / ".ready").write_bytes(b"ok")
        try:
            with urllib.request.urlopen(f"{self.endpoint}/.ready", timeout=2) as resp:
                resp.read()
        except urllib.error.HTTPError:
            return False
        except OSError:
            return False
        self.info["version"] = nginx_version()
        self.info["config"] = (
            f"{self.workers} workers, sendfile on, static root for GET, "
            "dav_methods PUT (body temp file + rename, no fsync)"
        )
        return True

    def make_bucket(self, bucket: str) -> None:
        (self.root / bucket).mkdir(parents=True, exist_ok=True)

    def put_file(self, bucket: str, key: str, data: bytes) -> None:
        path = self.root / bucket / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


if __name__ == "__main__":  # manual check: start, GET and PUT once, stop
    import http.client

    n = Nginx().start()
    try:
        n.put_file("b", "k", b"hello")
        c = http.client.HTTPConnection("127.0.0.1", n.port)
        c.request("GET", "/b/k")
        r = c.getresponse()
        print("GET", r.status, r.read())
        c.request("PUT", "/b/x/y", body=b"world")
        r = c.getresponse()
        print("PUT", r.status, r.read(), (n.root / "b/x/y").read_bytes())
        time.sleep(0.1)
    finally:
        n.stop()
