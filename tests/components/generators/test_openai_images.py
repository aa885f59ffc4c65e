"""generator=openai_images against a real HTTP server on 127.0.0.1 speaking the images API
wire format with scripted replies (no network beyond loopback)."""

import base64
import hashlib
import io
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PIL import Image

from agentcir.components.generators.openai_images import ImagesAPIError
from agentcir.framework.errors import InputError
from agentcir.registry import GENERATORS, ConfigError

pytest.importorskip("httpx", reason="generator 'openai_images' needs the [llm] extra")


def png(colour=(200, 30, 30), size=(8, 8)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return buf.getvalue()


def jpeg(colour=(30, 30, 200)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buf, format="JPEG")
    return buf.getvalue()


class Server:
    """Scripted images API: each request pops the next action for its path."""

    def __init__(self):
        self.script: list = []
        self.requests: list[dict] = []
        self.files = {"/files/a.png": png((10, 200, 10))}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _reply(self, status, body, headers=()):
                data = (
                    body
                    if isinstance(body, bytes)
                    else json.dumps(body).encode()
                    if not isinstance(body, str)
                    else body.encode()
                )
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                outer.requests.append({"method": "GET", "path": self.path, "headers": dict(self.headers)})
                if self.path in outer.files:
                    self._reply(200, outer.files[self.path], [("Content-Type", "image/png")])
                else:
                    self._reply(404, {"error": {"message": "no such file"}})

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(n)
                ctype = self.headers.get("Content-Type", "")
                outer.requests.append(
                    {
                        "method": "POST",
                        "path": self.path,
                        "headers": dict(self.headers),
                        "json": json.loads(raw) if ctype.startswith("application/json") else None,
                        "raw": raw,
                    }
                )
                action = outer.script.pop(0) if outer.script else ("ok", png())
                kind = action[0]
                if kind == "ok":
                    self._reply(200, {"created": 1, "data": [{"b64_json": base64.b64encode(action[1]).decode()}]})
                elif kind == "url":
                    self._reply(200, {"data": [{"url": f"http://127.0.0.1:{outer.port}/files/a.png"}]})
                elif kind == "status":
                    self._reply(action[1], {"error": {"message": action[2]}}, action[3] if len(action) > 3 else ())
                elif kind == "sleep":
                    time.sleep(action[1])
                    self._reply(200, {"data": [{"b64_json": base64.b64encode(png()).decode()}]})
                elif kind == "raw":
                    self._reply(200, action[1], [("Content-Type", "application/json")])

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


@pytest.fixture
def make(server, tmp_path):
    made = []

    def build(**cfg):
        base = {
            "base_url": server.url,
            "model": "img-test",
            "api_key": "sk-test",
            "output_dir": str(tmp_path / "out"),
            "backoff": 0.01,
            "timeout": 2.0,
            "retries": 2,
            "size": "256x256",
        }
        gen = GENERATORS.build("openai_images", {**base, **cfg})
        made.append(gen)
        return gen

    yield build
    for g in made:
        g.close()


def test_b64_image_saved_as_content_addressed_png(make, server, tmp_path):
    data = png()
    server.script = [("ok", data)]
    path = make().generate("a red shirt with white stripes")
    assert path.parent == (tmp_path / "out").resolve() and path.suffix == ".png"
    assert path.read_bytes() == data and path.stem == hashlib.sha256(data).hexdigest()[:32]
    req = server.requests[0]
    assert req["path"] == "/v1/images/generations" and req["headers"]["Authorization"] == "Bearer sk-test"
    assert req["json"] == {
        "model": "img-test",
        "prompt": "a red shirt with white stripes",
        "n": 1,
        "size": "256x256",
        "response_format": "b64_json",
    }
    server.script = [("ok", data)]
    assert make().generate("again") == path  # same bytes, same file


def test_non_png_reply_is_converted(make, server):
    server.script = [("ok", jpeg())]
    path = make().generate("a blue shirt")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as im:
        assert im.size == (8, 8)


def test_429_then_success_is_retried_honouring_retry_after(make, server, caplog):
    server.script = [("status", 429, "slow down", [("Retry-After", "0.2")]), ("ok", png())]
    gen = make(backoff=5.0)  # Retry-After wins over the (long) backoff
    t0 = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="agentcir"):
        path = gen.generate("a cat")
    took = time.perf_counter() - t0
    assert path.is_file() and gen.requests_sent == 2 and len(server.requests) == 2
    assert 0.2 <= took < 3.0
    assert "HTTP 429: slow down (attempt 1)" in caplog.text


def test_500_is_retried_then_fails_with_the_last_error(make, server):
    server.script = [("status", 500, "boom")] * 3
    gen = make(retries=2)
    with pytest.raises(ImagesAPIError) as e:
        gen.generate("a cat")
    assert gen.requests_sent == 3
    assert str(e.value) == (
        f"generator 'openai_images': POST {server.url}/images/generations failed after 3 "
        f"attempt(s); last: HTTP 500: boom"
    )


def test_timeout_is_retried(make, server):
    server.script = [("sleep", 1.5), ("ok", png())]
    gen = make(timeout=0.5, retries=1)
    assert gen.generate("a cat").is_file() and gen.requests_sent == 2
    server.script = [("sleep", 1.0), ("sleep", 1.0)]
    with pytest.raises(ImagesAPIError, match=r"failed after 2 attempt\(s\); last: timed out after 0.3 s"):
        make(timeout=0.3, retries=1).generate("a cat")


def test_client_error_is_not_retried(make, server):
    server.script = [("status", 400, "Your prompt was rejected by the safety system")]
    gen = make()
    with pytest.raises(ImagesAPIError, match="failed with HTTP 400: Your prompt was rejected by the safety system"):
        gen.generate("something")
    assert gen.requests_sent == 1


def test_malformed_replies(make, server):
    server.script = [("raw", "{not json")]
    with pytest.raises(ImagesAPIError, match=r"the reply is not JSON: '\{not json'"):
        make().generate("x")
    server.script = [("raw", '{"data": []}')]
    with pytest.raises(ImagesAPIError, match="the reply has no 'data' list of images"):
        make().generate("x")
    server.script = [("raw", '{"data": [{"b64_json": "***"}]}')]
    with pytest.raises(ImagesAPIError, match="'b64_json' is not base64"):
        make().generate("x")
    server.script = [("raw", json.dumps({"data": [{"b64_json": base64.b64encode(b"hello").decode()}]}))]
    with pytest.raises(InputError, match="the returned data is not an image"):
        make().generate("x")


def test_url_reply_is_fetched(make, server):
    server.script = [("url",)]
    path = make().generate("x")
    assert path.read_bytes() == server.files["/files/a.png"]
    assert [r["method"] for r in server.requests] == ["POST", "GET"]


def test_edit_with_the_reference(make, server, images):
    server.script = [("ok", png())]
    make(use_reference=True).generate("make it blue", reference=images["red_tshirt"])
    req = server.requests[0]
    assert req["path"] == "/v1/images/edits"
    assert req["headers"]["Content-Type"].startswith("multipart/form-data")
    assert b'name="prompt"' in req["raw"] and b"make it blue" in req["raw"] and b"\x89PNG" in req["raw"]
    with pytest.raises(InputError, match="reference image '.*nope.png' does not exist"):
        make(use_reference=True).generate("x", reference=images["red_tshirt"].with_name("nope.png"))


def test_key_from_environment_and_bad_inputs(make, server, monkeypatch):
    monkeypatch.setenv("MY_IMAGES_KEY", "sk-env")
    server.script = [("ok", png())]
    make(api_key="", api_key_env="MY_IMAGES_KEY").generate("x")
    assert server.requests[-1]["headers"]["Authorization"] == "Bearer sk-env"
    with pytest.raises(InputError, match="description must be a non-empty text"):
        make().generate("")
    with pytest.raises(ConfigError, match="field 'retries': must be at least 0, got -1"):
        make(retries=-1)


def test_identity(make):
    a = make()
    assert make(api_key="other", timeout=9.0, retries=0, backoff=3.0).identity == a.identity  # volatile
    assert make(model="other-model").identity != a.identity
    assert make(size="512x512").identity != a.identity
    # the served model, not where it is reached: another host or port keeps the cache
    assert make(base_url="http://127.0.0.1:1/v1").identity == a.identity
    assert make(revision="v2").identity != a.identity


def test_connection_refused_is_retried_and_named(tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    gen = GENERATORS.build(
        "openai_images",
        {"base_url": f"http://127.0.0.1:{port}/v1", "retries": 1, "backoff": 0.01, "output_dir": str(tmp_path)},
    )
    with pytest.raises(ImagesAPIError, match=r"failed after 2 attempt\(s\); last: connection error \(ConnectError"):
        gen.generate("x")
    gen.close()


class Foreign:
    """Another host's file server: records every request's headers, serves one PNG (or a big body)."""

    def __init__(self, body: bytes, *, declare_length: bool = True):
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}})
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                if declare_length:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    for i in range(0, len(body), 65536):
                        self.wfile.write(body[i : i + 65536])
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_an_image_url_on_another_host_gets_no_credentials(make, server):
    """The endpoint's reply names a file on another server: it is fetched, and the API key is not sent there."""
    foreign = Foreign(png((1, 2, 3)))
    try:
        server.script = [("raw", json.dumps({"data": [{"url": foreign.url + "/img/x.png?sig=1"}]}))]
        path = make(api_key="sk-secret-key").generate("x")
        assert path.read_bytes() == png((1, 2, 3))
        assert server.requests[0]["headers"]["Authorization"] == "Bearer sk-secret-key"  # the API itself gets the key
        [got] = foreign.requests
        assert got["path"] == "/img/x.png?sig=1"
        assert "authorization" not in got["headers"] and "sk-secret-key" not in json.dumps(got["headers"])
        assert "cookie" not in got["headers"]
    finally:
        foreign.close()


@pytest.mark.parametrize("declare_length", [True, False])
def test_an_image_url_is_fetched_under_a_size_cap(make, server, declare_length):
    foreign = Foreign(b"\x89PNG" + b"0" * (3 * 2**20), declare_length=declare_length)
    try:
        server.script = [("raw", json.dumps({"data": [{"url": foreign.url + "/big.png"}]}))]
        with pytest.raises(ImagesAPIError, match=r"larger than max_image_mb=1"):
            make(max_image_mb=1).generate("x")
        assert len(foreign.requests) == 1  # refused, not retried
    finally:
        foreign.close()


def test_an_image_url_fetch_times_out(make, server):
    import socket

    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        port = silent.getsockname()[1]
        server.script = [("raw", json.dumps({"data": [{"url": f"http://127.0.0.1:{port}/slow.png"}]}))]
        t = time.perf_counter()
        with pytest.raises(ImagesAPIError, match=r"failed after 1 attempt\(s\); last: timed out after 0.3 s"):
            make(fetch_timeout=0.3, retries=0).generate("x")
        assert time.perf_counter() - t < 5


def test_image_url_schemes_and_settings_are_checked(make, server):
    server.script = [("raw", json.dumps({"data": [{"url": "file:///etc/passwd"}]}))]
    with pytest.raises(ImagesAPIError, match="not http"):
        make().generate("x")
    for bad in ({"max_image_mb": 0}, {"fetch_timeout": -1}, {"max_image_mb": float("nan")}):
        with pytest.raises(ValueError, match=f"field '{next(iter(bad))}'"):  # ConfigError of the range check
            make(**bad)
