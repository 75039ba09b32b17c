"""A real browser against tierstore: pages from other loopback origins use CORS and POST uploads.

Each page is served by a small http.server on its own port (so its origin differs from the
store's), loaded in headless Chromium with `--dump-dom`; the page's script writes its outcome as
JSON into <pre id="result">, which the test reads back from the dumped DOM. The browser itself
enforces CORS: a disallowed origin's fetch fails before any byte of the PUT is sent.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.conftest import ServerProcess, make_client

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (Debian: chromium)"
)
BROWSER_TIMEOUT = 90


class PageServer:
    """Serves fixed pages on a loopback port: one web origin."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        pages = self.pages

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                path = self.path.split("?", 1)[0]
                body = pages.get(path)
                if body is None and path == "/done":  # success_action_redirect lands here
                    body = f'<pre id="result">{html.escape(json.dumps({"redirected": self.path}))}</pre>'
                data = (body or "not found").encode()
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture
def sites() -> Iterator[tuple[PageServer, PageServer]]:
    """Two page origins: the first is allowed by the bucket's CORS rules, the second is not."""
    allowed, other = PageServer(), PageServer()
    try:
        yield allowed, other
    finally:
        allowed.close()
        other.close()


def run_page(site: PageServer, path: str, script: str, tmp_path: Path) -> dict[str, Any]:
    """Load `script` as a page of `site` in headless Chromium; the JSON it wrote to #result."""
    site.pages[path] = (
        '<!doctype html><html><body><pre id="result">pending</pre><script>\n'
        "const done = (value) => { document.getElementById('result').textContent = JSON.stringify(value); };\n"
        f"(async () => {{ {script} }})().catch((e) => done({{error: String(e)}}));\n"
        "</script></body></html>"
    )
    assert CHROMIUM is not None
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=20000",
               "--dump-dom", site.origin + path]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT)
    match = re.search(r'<pre id="result">(.*?)</pre>', done.stdout, re.S)
    assert match, (
        f"no result in the page (rc {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    )
    text = html.unescape(match.group(1))
    assert text != "pending", f"the page did not finish:\n{done.stderr[-2000:]}"
    return json.loads(text)


@pytest.fixture
def signer(server: ServerProcess):
    return make_client(server.endpoint, signature_version="s3v4")


def allow(s3, bucket: str, origin: str) -> None:
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [{
        "AllowedOrigins": [origin], "AllowedMethods": ["GET", "PUT", "POST"],
        "AllowedHeaders": ["*"], "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 60,
    }]})  # fmt: skip


PUT_THEN_GET = """
const put = await fetch(PUT_URL, {method: 'PUT', body: 'from the browser', headers: {'Content-Type': 'text/plain'}});
const etag = put.headers.get('ETag');
const got = await fetch(GET_URL);
done({put: put.status, etag: etag, get: got.status, body: await got.text()});
"""


def put_then_get(signer, bucket: str, key: str) -> str:
    put_url = signer.generate_presigned_url(
        "put_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=300
    )
    get_url = signer.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=300
    )
    return f"const PUT_URL = {json.dumps(put_url)}; const GET_URL = {json.dumps(get_url)};" + PUT_THEN_GET


def test_an_allowed_origin_uploads_and_reads(s3, signer, bucket, sites, tmp_path) -> None:
    allowed, _ = sites
    allow(s3, bucket, allowed.origin)
    result = run_page(allowed, "/upload.html", put_then_get(signer, bucket, "page.txt"), tmp_path)
    assert result["put"] == 200 and result["get"] == 200, result
    assert result["body"] == "from the browser"
    assert result["etag"] == s3.head_object(Bucket=bucket, Key="page.txt")["ETag"]  # exposed by the rule


def test_a_disallowed_origin_is_blocked_by_the_browser(s3, signer, bucket, sites, tmp_path) -> None:
    allowed, other = sites
    allow(s3, bucket, allowed.origin)
    result = run_page(other, "/upload.html", put_then_get(signer, bucket, "page.txt"), tmp_path)
    assert "error" in result and "Failed to fetch" in result["error"], result
    with pytest.raises(ClientError):  # the preflight failed: the PUT was never sent
        s3.head_object(Bucket=bucket, Key="page.txt")


def test_a_page_posts_a_form_upload(s3, signer, bucket, sites, tmp_path) -> None:
    allowed, _ = sites
    allow(s3, bucket, allowed.origin)
    presigned = signer.generate_presigned_post(
        bucket,
        "forms/${filename}",
        Fields={"success_action_status": "201", "Content-Type": "text/plain"},
        Conditions=[{"success_action_status": "201"}, ["starts-with", "$Content-Type", "text/"]],
    )
    script = f"""
const form = new FormData();
for (const [name, value] of Object.entries({json.dumps(presigned["fields"])})) form.append(name, value);
form.append('file', new Blob(['posted by a page'], {{type: 'text/plain'}}), 'note.txt');
const reply = await fetch({json.dumps(presigned["url"])}, {{method: 'POST', body: form}});
const text = await reply.text();
done({{status: reply.status, key: new DOMParser().parseFromString(text, 'application/xml')
  .querySelector('Key')?.textContent}});
"""
    result = run_page(allowed, "/post.html", script, tmp_path)
    assert result == {"status": 201, "key": "forms/note.txt"}, result
    got = s3.get_object(Bucket=bucket, Key="forms/note.txt")
    assert (got["Body"].read(), got["ContentType"]) == (b"posted by a page", "text/plain")


def test_a_submitted_html_form_uploads_and_redirects(s3, signer, bucket, sites, tmp_path) -> None:
    """A plain <form> submission (no CORS involved: a navigation), redirected back to the site."""
    allowed, _ = sites
    presigned = signer.generate_presigned_post(
        bucket,
        "submitted/${filename}",
        Fields={"success_action_redirect": allowed.origin + "/done"},
        Conditions=[["starts-with", "$success_action_redirect", allowed.origin]],
    )
    inputs = "".join(
        f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
        for k, v in presigned["fields"].items()
    )
    script = f"""
const holder = document.createElement('div');
holder.innerHTML = {
        json.dumps(
            f'<form method="post" enctype="multipart/form-data" action="{presigned["url"]}">'
            f'{inputs}<input type="file" name="file"></form>'
        )
    };
document.body.appendChild(holder);
const form = holder.querySelector('form');
const files = new DataTransfer();
files.items.add(new File(['submitted as a form'], 'form.txt', {{type: 'text/plain'}}));
form.querySelector('input[type=file]').files = files.files;
form.submit();
"""
    result = run_page(allowed, "/form.html", script, tmp_path)
    assert "redirected" in result, result
    assert f"bucket={bucket}" in result["redirected"] and "key=submitted%2Fform.txt" in result["redirected"]
    assert s3.get_object(Bucket=bucket, Key="submitted/form.txt")["Body"].read() == b"submitted as a form"
