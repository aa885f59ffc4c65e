"""The serve security model: the Host allow-list (DNS rebinding), security headers on every
response, the token never taken from a URL, and uploads into a folder that cannot be written."""

from __future__ import annotations

import errno
import http.client
import io
import socket

import pytest
from PIL import Image

from .conftest import make_client, running_app


@pytest.fixture
def client(searcher, ask_factory, tmp_path):
    return make_client(searcher, ask_factory, tmp_path)


def _png(colour=(10, 20, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (16, 16), colour).save(out, "PNG")
    return out.getvalue()


ROUTES = [
    "/",
    "/docs",
    "/openapi.json",
    "/api/info",
    "/api/progress",
    "/image/0",
    "/thumb/0",
    "/static/app.js",
    "/docs-assets/swagger-ui.css",
    "/upload/0123456789abcdef0123456789abcdef.png/thumb",
]


def test_a_rebinding_host_is_refused_on_every_route(client):
    for path in ROUTES:
        r = client.get(path, headers={"Host": "attacker.example"})
        assert r.status_code == 400, path
        assert (
            "Host 'attacker.example' is not served here" in r.json()["detail"] and "--allow-host" in r.json()["detail"]
        )
    r = client.post("/api/search", data={"text": "x"}, headers={"Host": "attacker.example:8000"})
    assert r.status_code == 400
    r = client.post("/api/ask", data={"question": "photos from Rome"}, headers={"Host": "rebind.attacker.example"})
    assert r.status_code == 400
    for ok in ("localhost", "localhost:8000", "127.0.0.1:8000", "[::1]:8000", "LOCALHOST"):
        assert client.get("/api/info", headers={"Host": ok}).status_code == 200, ok
    for bad in ("localhost.attacker.example", "127.0.0.1.nip.io", "10.0.0.5", ""):
        assert client.get("/api/info", headers={"Host": bad}).status_code == 400, bad


def test_allowed_hosts_from_the_config_the_environment_and_the_bind(searcher, ask_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTCIR_ALLOW_HOSTS", "photos.lan, *.home.example")
    c = make_client(searcher, ask_factory, tmp_path, allow_hosts=("nas.local",), host="192.168.1.20")
    for ok in ("nas.local:8000", "photos.lan", "pi.home.example", "192.168.1.20:8000"):
        assert c.get("/api/info", headers={"Host": ok}).status_code == 200, ok
    for bad in ("home.example.attacker.example", "192.168.1.21", "evil.example"):
        assert c.get("/api/info", headers={"Host": bad}).status_code == 400, bad
    # bound to every interface: IP literals are answered (a rebinding page sends its own name), names are not
    wild = make_client(searcher, ask_factory, tmp_path, host="0.0.0.0")
    assert wild.get("/api/info", headers={"Host": "192.168.1.21:8000"}).status_code == 200
    assert wild.get("/api/info", headers={"Host": "[fe80::1]:8000"}).status_code == 200
    assert wild.get("/api/info", headers={"Host": "evil.example"}).status_code == 400


def test_a_raw_rebinding_request_to_a_running_server(searcher, ask_factory, tmp_path):
    """A real socket to uvicorn, the Host header written by hand (what a rebinding browser sends)."""
    from agentcir.serve import ServeConfig, create_app

    app = create_app(searcher, uploads=tmp_path / "up", thumbs=tmp_path / "t", config=ServeConfig(warm_up=False))
    with running_app(app) as port:

        def get(host: str) -> tuple[int, bytes]:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(f"GET /image/0 HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
                resp = http.client.HTTPResponse(sock)
                resp.begin()
                return resp.status, resp.read()

        status, body = get(f"rebind.attacker.example:{port}")
        assert status == 400 and b"not served here" in body
        status, body = get(f"127.0.0.1:{port}")
        assert status == 200 and len(body) > 100


def test_security_headers_on_every_response(client, searcher, ask_factory, tmp_path):
    responses = {p: client.get(p) for p in ROUTES}
    responses["POST /api/search (400)"] = client.post("/api/search", data={"text": " "})
    responses["GET /thumb/-1 (404)"] = client.get("/thumb/-1")
    responses["rebinding (400)"] = client.get("/api/info", headers={"Host": "evil.example"})
    responses["401"] = make_client(searcher, ask_factory, tmp_path, token="t").get("/api/info")
    for what, r in responses.items():
        h = r.headers
        assert h["x-content-type-options"] == "nosniff", what
        assert h["referrer-policy"] == "no-referrer", what
        assert h["x-frame-options"] == "DENY", what
        assert "frame-ancestors 'none'" in h["content-security-policy"], what
        assert h["cross-origin-resource-policy"] == "same-origin", what
    assert "default-src 'none'" in responses["/api/info"].headers["content-security-policy"]
    assert "default-src 'none'" in responses["/image/0"].headers["content-security-policy"]
    assert "script-src 'self'" in responses["/"].headers["content-security-policy"]  # the page keeps its own policy
    docs = responses["/docs"]
    assert "<script>" not in docs.text and '<script src="/static/docs.js">' in docs.text  # no inline script to allow
    assert "script-src 'self'" in docs.headers["content-security-policy"]
    assert "unsafe-inline" not in docs.headers["content-security-policy"].split("script-src")[1].split(";")[0]


def test_the_token_is_never_taken_from_the_url(searcher, ask_factory, tmp_path):
    c = make_client(searcher, ask_factory, tmp_path, token="s3cret")
    c.follow_redirects = False
    for path in ("/api/info?token=s3cret", "/image/0?token=s3cret", "/thumb/0?size=128&token=s3cret"):
        r = c.get(path)
        assert r.status_code == 303, path  # not answered: redirected, the token set as an HttpOnly cookie
        assert r.headers["location"] == path.split("?")[0] + ("?size=128" if "size" in path else "")
        cookie = r.headers["set-cookie"]
        assert "agentcir_token=s3cret" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert r.headers["x-content-type-options"] == "nosniff"
        c.cookies.clear()
    assert c.get("/api/info?token=wrong").status_code == 401
    assert c.post("/api/search?token=s3cret", data={"text": "x"}).status_code == 401  # only a GET opens the page
    r = c.get("http://127.0.0.1//attacker.example/?token=s3cret")  # no open redirect to another host
    assert r.status_code == 303 and r.headers["location"] == "/attacker.example/"
    # with the cookie, the token in the URL is still not the request's credential: a redirect again
    c.cookies.set("agentcir_token", "s3cret")
    assert c.get("/api/info").status_code == 200
    assert c.get("/api/info?token=s3cret").status_code == 303
    c.cookies.clear()
    assert c.get("/api/info").status_code == 401


@pytest.mark.parametrize(
    "code,status,words",
    [(errno.ENOSPC, 507, "is full"), (errno.EROFS, 500, "cannot be written"), (errno.EACCES, 500, "cannot be written")],
)
def test_uploads_into_a_folder_that_cannot_be_written(
    searcher, ask_factory, tmp_path, monkeypatch, code, status, words
):
    from pathlib import Path

    c = make_client(searcher, ask_factory, tmp_path)
    real = Path.write_bytes

    def failing(self, data):
        if self.parent == tmp_path / "up":
            raise OSError(code, "simulated", str(self))
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", failing)
    r = c.post("/api/search", files={"image": ("mine.png", _png(), "image/png")}, data={"text": "in red"})
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert words in detail and f"upload folder '{tmp_path / 'up'}'" in detail and "Traceback" not in r.text
    assert (
        c.post("/api/search", data={"text": "in red", "k": "3"}).status_code == 200
    )  # searches without upload still work


def test_uploads_into_a_real_read_only_or_full_file_system(searcher, ask_factory, tmp_path):
    """A real tmpfs (when this process may mount one): read-only -> 500, full -> 507, both in words."""
    from tests.full_disk import fill, mount_tmpfs, umount

    up = tmp_path / "up"
    mounted, why = mount_tmpfs(up, "1m", "ro")
    if not mounted:
        pytest.skip(f"no tmpfs: {why}")
    try:
        c = make_client(searcher, ask_factory, tmp_path)
        r = c.post("/api/search", files={"image": ("mine.png", _png(), "image/png")}, data={"text": "in red"})
        assert r.status_code == 500, r.text
        assert r.json()["detail"] == (
            f"the upload cannot be stored: the upload folder '{up}' cannot be written (it is on "
            f"a read-only file system): give a writable folder"
        )
    finally:
        umount(up)
    assert mount_tmpfs(up, "256k")[0]
    try:
        fill(up / ".filler", 0)
        c = make_client(searcher, ask_factory, tmp_path)
        r = c.post("/api/search", files={"image": ("mine.png", _png((1, 2, 3)), "image/png")}, data={"text": "in red"})
        assert r.status_code == 507, r.text
        assert (
            r.json()["detail"].startswith(
                f"the upload cannot be stored: the disk holding the upload folder '{up}' is full"
            )
            and "Traceback" not in r.text
        )
        assert not [p for p in up.iterdir() if p.name != ".filler"]  # no torn or temporary file left
    finally:
        umount(up)


def test_thumbnails_are_served_when_their_cache_cannot_be_written(searcher, ask_factory, tmp_path, monkeypatch):
    from pathlib import Path

    c = make_client(searcher, ask_factory, tmp_path)
    real = Path.write_bytes

    def failing(self, data):
        if (tmp_path / "thumbs") in self.parents:
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", failing)
    r = c.get("/thumb/1?size=128")
    assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg" and r.content[:2] == b"\xff\xd8"


def test_the_serve_command_passes_its_host_and_allowed_names(gallery, monkeypatch):
    import uvicorn
    from fastapi.testclient import TestClient

    from agentcir.cli import main

    _, gdir, root, _ = gallery
    apps = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: apps.append(app))
    monkeypatch.delenv("AGENTCIR_ALLOW_HOSTS", raising=False)
    assert (
        main(
            [
                "serve",
                "--gallery",
                str(gdir),
                "--host",
                "10.1.2.3",
                "--allow-host",
                "nas.local",
                "--token",
                "t",
                "--allow-host",
                "photos.lan",
                f"run.root={root}",
                "--no-questions",
            ]
        )
        == 0
    )
    c = TestClient(apps[-1], base_url="http://nas.local")
    auth = {"Authorization": "Bearer t"}
    for host in ("nas.local", "photos.lan:8000", "10.1.2.3:8000", "localhost"):
        assert c.get("/api/progress", headers={**auth, "Host": host}).status_code == 200, host
    assert c.get("/api/progress", headers={**auth, "Host": "10.1.2.4"}).status_code == 400
