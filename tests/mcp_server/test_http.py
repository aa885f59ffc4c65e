"""``agentcir mcp --transport streamable-http`` in a subprocess, driven by the MCP SDK's
streamable HTTP client: the tools over HTTP, a reference sent as bytes, and the outer layer it
shares with ``agentcir serve`` (bearer token, Host allow-list, body limit). One server for the
module."""

from __future__ import annotations

import asyncio
import base64
import io
import socket
import subprocess
import time

import pytest

from .conftest import DEMO, ROOT, server_command, text_of

pytestmark = pytest.mark.slow
TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def server(gallery):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe, args, env = server_command(
        gallery,
        "--transport",
        "streamable-http",
        "--port",
        str(port),
        "--max-upload-mb",
        "1",
        "--no-questions",
        "--no-updates",
        "method=image_text_sum",
    )
    proc = subprocess.Popen(
        [exe, *args],
        env={**env, "AGENTCIR_TOKEN": TOKEN},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 180
    while time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("agentcir mcp did not start listening")
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def session(server, gallery):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    photos = gallery[0]
    first = sorted(DEMO.iterdir())[0]
    ref = base64.b64encode(first.read_bytes()).decode()
    too_big = base64.b64encode(bytes(1_200_000)).decode()  # 1.2 MB of bytes: over the 1 MB limit
    out = {}

    async def script():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as http:
            async with Client(streamable_http_client(server, http_client=http)) as c:
                out["tools"] = {t.name for t in (await c.list_tools()).tools}
                out["text"] = await c.call_tool("text_search", {"text": "a blue shirt", "k": 4})
                out["bytes"] = await c.call_tool("composed_search", {"reference_image": ref, "k": 3})
                out["too_big"] = await c.call_tool("composed_search", {"reference_image": too_big})
                out["not_image"] = await c.call_tool(
                    "composed_search", {"reference_image": base64.b64encode(b"hello").decode()}
                )
                out["view"] = await c.call_tool("view_photo", {"path": str(photos / first.name), "size": 256})
                out["outside"] = await c.call_tool("view_photo", {"path": "/etc/hostname"})

    asyncio.run(script())
    out["first"] = first.stem
    return out


def test_tools_over_http(session):
    from agentcir.mcp_server import TOOL_NAMES

    # --no-updates: no update_index tool; --no-questions (and a method answering no questions): no ask_history
    assert session["tools"] == set(TOOL_NAMES) - {"update_index", "ask_history"}
    r = session["text"]
    assert not r.is_error, text_of(r)
    assert r.structured_content["mode"] == "text" and len(r.structured_content["hits"]) == 4


def test_a_reference_sent_as_bytes(session):
    r = session["bytes"]
    assert not r.is_error, text_of(r)
    s = r.structured_content
    assert s["mode"] == "image" and len(s["hits"]) == 3
    assert session["first"] not in [h["id"] for h in s["hits"]]  # the same bytes as a gallery photo: excluded


@pytest.mark.parametrize(
    "key,words",
    [
        ("too_big", "larger than 1 MB"),
        ("not_image", "not an image agentcir can read"),
        ("outside", "outside the photo folders served here"),
    ],
)
def test_refused_inputs(session, key, words):
    r = session[key]
    assert r.is_error and words in text_of(r), text_of(r)


def test_view_photo_over_http(session):
    from PIL import Image

    image = next(c for c in session["view"].content if c.type == "image")
    with Image.open(io.BytesIO(base64.b64decode(image.data))) as im:
        assert max(im.size) <= 256


def _post(url: str, headers: dict, body: bytes = b"{}"):
    import httpx2

    return httpx2.post(
        url,
        content=body,
        headers={"content-type": "application/json", "accept": "application/json, text/event-stream", **headers},
    )


def test_the_outer_layer_of_serve_guards_http(server):
    assert _post(server, {}).status_code == 401  # no token
    assert _post(server, {"authorization": "Bearer wrong"}).status_code == 401
    r = _post(server, {"authorization": f"Bearer {TOKEN}", "host": "evil.example"})
    assert r.status_code == 400 and "not served here" in r.json()["detail"]  # DNS rebinding
    r = _post(server, {"authorization": f"Bearer {TOKEN}"}, b"x" * (3 * 2**20))
    assert r.status_code == 413
    assert r.headers["x-content-type-options"] == "nosniff"
