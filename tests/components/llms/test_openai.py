"""The OpenAI-compatible client against a real HTTP server on 127.0.0.1 with scripted replies."""

import asyncio
import base64
import io
import json
import threading
import time

import pytest
from PIL import Image

from agentcir.components.llms.http import EndpointError, backoff_delay, image_data_url, retry_after_seconds
from agentcir.framework.parsing import ReplyParseError
from agentcir.components.llms.scripted_server import ScriptedServer, Step, chat_completion, error_body
from agentcir.framework.cache import CallCache
from agentcir.framework.errors import InputError
from agentcir.framework.interfaces import assistant_message, tool_message, user_message
from agentcir.framework.runner import RunContext
from agentcir.registry import LLMS, ConfigError

CHAT = "/chat/completions"


@pytest.fixture
def server():
    with ScriptedServer() as srv:
        yield srv


def make_llm(srv, **cfg):
    cfg = {
        "base_url": srv.base_url,
        "model": "test-model",
        "api_key": "sk-secret-123",
        "retries": 2,
        "backoff": 0.01,
        "backoff_max": 0.05,
        "timeout": 5.0,
        **cfg,
    }
    llm = LLMS.build("openai", cfg)
    return llm


def test_success_and_request_format(server):
    server.script(CHAT, Step(json=chat_completion("Hello there")))
    llm = make_llm(server, temperature=0.3, max_tokens=50, seed=7)
    try:
        reply = llm.chat([{"role": "system", "content": "be brief"}, user_message("hi")])
    finally:
        llm.close()
    assert reply.text == "Hello there" and reply.tool_calls == []
    (req,) = server.requests
    assert req.path == "/v1/chat/completions" and req.method == "POST"
    assert req.headers["authorization"] == "Bearer sk-secret-123"
    assert req.json == {
        "model": "test-model",
        "temperature": 0.3,
        "max_tokens": 50,
        "seed": 7,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    }


def test_key_and_base_url_from_the_environment(server, monkeypatch):
    server.script(CHAT, Step(json=chat_completion("ok")))
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("MY_KEY", "sk-from-env")
    llm = LLMS.build("openai", {"model": "m", "api_key_env": "MY_KEY"})
    try:
        assert llm.chat([user_message("x")]).text == "ok"
    finally:
        llm.close()
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"


def test_no_key_sends_no_authorization(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.script(CHAT, Step(json=chat_completion("ok")))
    llm = make_llm(server, api_key=None)
    try:
        llm.chat([user_message("x")])
    finally:
        llm.close()
    assert "authorization" not in server.requests[0].headers


def test_429_then_success_honours_retry_after(server):
    server.script(
        CHAT,
        [
            Step(status=429, json=error_body("slow down", "rate_limit"), headers={"Retry-After": "0.4"}),
            Step(json=chat_completion("fine")),
        ],
    )
    llm = make_llm(server)
    t0 = time.perf_counter()
    try:
        assert llm.chat([user_message("x")]).text == "fine"
    finally:
        llm.close()
    assert len(server.requests) == 2
    assert time.perf_counter() - t0 >= 0.4  # waited as the server asked, not the 0.01 s backoff
    assert llm.http.requests == 2


def test_retry_after_beyond_the_limit_fails_at_once(server):
    server.script(CHAT, Step(status=429, json=error_body("quota"), headers={"Retry-After": "3600"}))
    llm = make_llm(server, retry_after_max=10)
    try:
        with pytest.raises(EndpointError, match=r"retry after 3600 s \(more than retry_after_max=10 s\)"):
            llm.chat([user_message("x")])
    finally:
        llm.close()
    assert len(server.requests) == 1


def test_500_is_retried_then_fails_with_a_clear_message(server):
    server.script(CHAT, Step(status=500, json=error_body("the GPU caught fire")))
    llm = make_llm(server, retries=2)
    try:
        with pytest.raises(EndpointError) as e:
            llm.chat([user_message("x")])
    finally:
        llm.close()
    assert len(server.requests) == 3
    msg = str(e.value)
    assert msg.startswith("llm 'openai' (model test-model): POST http://127.0.0.1:")
    assert "failed after 3 attempt(s): HTTP 500: the GPU caught fire" in msg
    assert e.value.status == 500 and e.value.attempts == 3
    assert "sk-secret-123" not in msg


def test_client_errors_are_not_retried(server):
    server.script(CHAT, Step(status=400, json=error_body("messages: field required", "invalid_request_error")))
    llm = make_llm(server)
    try:
        with pytest.raises(EndpointError, match=r"failed with HTTP 400: messages: field required$"):
            llm.chat([user_message("x")])
    finally:
        llm.close()
    assert len(server.requests) == 1


def test_401_hints_at_the_key_without_showing_it(server):
    server.script(CHAT, Step(status=401, json=error_body("Incorrect API key provided: sk-secr***123")))
    llm = make_llm(server)
    try:
        with pytest.raises(EndpointError) as e:
            llm.chat([user_message("x")])
    finally:
        llm.close()
    assert "check the API key" in str(e.value) and "sk-secret-123" not in str(e.value)


def test_timeout_then_success(server):
    server.script(CHAT, [Step(delay=1.5, json=chat_completion("late")), Step(json=chat_completion("on time"))])
    llm = make_llm(server, timeout=0.3)
    try:
        assert llm.chat([user_message("x")]).text == "on time"
    finally:
        llm.close()
    assert len(server.requests) == 2


def test_timeout_every_time(server):
    server.script(CHAT, Step(delay=1.5, json=chat_completion("late")))
    llm = make_llm(server, timeout=0.25, retries=1)
    t0 = time.perf_counter()
    try:
        with pytest.raises(EndpointError, match=r"failed after 2 attempt\(s\): timed out after 0.25 s") as e:
            llm.chat([user_message("x")])
    finally:
        llm.close()
    assert e.value.status is None
    assert time.perf_counter() - t0 < 1.4  # gave up on time, did not wait for the server


def test_connection_refused_is_retried_and_named(server):
    url = server.base_url
    server.stop()
    llm = LLMS.build("openai", {"base_url": url, "model": "m", "retries": 1, "backoff": 0.01})
    try:
        with pytest.raises(EndpointError, match=r"failed after 2 attempt\(s\): connection failed \(ConnectError"):
            llm.chat([user_message("x")])
    finally:
        llm.close()


def test_reply_that_is_not_json_is_retried_then_fails_clearly(server):
    server.script(CHAT, Step(body=b"<html>502 Bad Gateway</html>", content_type="text/html"))
    llm = make_llm(server)
    try:
        with pytest.raises(
            EndpointError,
            match=r"failed after 3 attempt\(s\): HTTP 200 with an unusable reply: not JSON "
            r"\(content-type text/html, 28 bytes\): '<html>502",
        ):
            llm.chat([user_message("x")])
    finally:
        llm.close()
    assert len(server.requests) == 3


def test_reply_without_choices_is_retried_then_fails_clearly(server):
    server.script(CHAT, Step(json={"object": "chat.completion", "choices": []}))
    llm = make_llm(server)
    try:
        with pytest.raises(EndpointError, match="HTTP 200 with an unusable reply: no choices"):
            llm.chat([user_message("x")])
    finally:
        llm.close()
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    "bad",
    [
        Step(body=b'{"id": "chatcmpl-1", "choices": [{"index": 0, "mess'),  # cut-off JSON, full length
        Step(json=chat_completion("a long reply " * 50), fault="truncate"),  # connection closed mid-body
        Step(body=b"I'm sorry, the service is busy. Please try again.", content_type="text/plain"),  # prose
        Step(json={"object": "chat.completion", "choices": []}),  # empty choices
        Step(json=chat_completion("x"), fault="reset"),  # reset without a reply
    ],
    ids=["truncated-json", "truncated-body", "prose", "empty-choices", "reset"],
)
def test_bad_200_replies_are_transient(server, bad):
    """A 200 with an unusable body is retried (with backoff) like a 5xx."""
    server.script(CHAT, [bad, bad, Step(json=chat_completion("recovered"))])
    llm = make_llm(server)
    try:
        assert llm.chat([user_message("x")]).text == "recovered"
    finally:
        llm.close()
    assert len(server.requests) == 3
    assert server.counts(CHAT).most_common(1)[0][1] == 3  # the same request body, three times


def test_json_task_malformed_reply_is_corrected_once(server):
    good = {"target_caption": "a photo of a blue dress", "modifications": ["make it blue"]}
    server.script(
        CHAT,
        [
            Step(json=chat_completion("Sure! {target_caption: 'a photo of a blue dress'")),
            Step(json=chat_completion("```json\n" + json.dumps(good) + "\n```")),
        ],
    )
    llm = make_llm(server)
    try:
        out = llm.run_task(
            "target_caption", {"reference_caption": "a photo of a red dress", "modification": "make it blue"}
        )
    finally:
        llm.close()
    assert json.loads(out.split("```json")[1].split("```")[0]) == good
    first, second = server.requests
    assert first.json["response_format"] == {"type": "json_object"}
    assert "a photo of a red dress" in first.json["messages"][0]["content"]
    assert second.json["messages"][1] == {
        "role": "assistant",
        "content": "Sure! {target_caption: 'a photo of a blue dress'",
    }
    assert second.json["messages"][2]["content"].startswith("Your reply could not be used: could not parse JSON")


def test_json_task_that_never_parses_raises(server):
    server.script(CHAT, Step(json=chat_completion("I cannot help with that.")))
    llm = make_llm(server, parse_retries=1)
    try:
        with pytest.raises(ReplyParseError) as e:
            llm.run_task("questions", {"reference_caption": "a", "modification": "b", "target_caption": "c", "n": 3})
    finally:
        llm.close()
    assert len(server.requests) == 2
    msg = str(e.value)
    assert (
        "reply to LLM task 'questions'" in msg
        and "no JSON object or array found" in msg
        and "(after 2 attempt(s))" in msg
    )
    assert "'I cannot help with that.'" in msg


def test_response_format_none(server):
    server.script(CHAT, Step(json=chat_completion('{"caption": "x"}')))
    llm = make_llm(server, response_format="none")
    try:
        llm.run_task("rewrite_caption", {"reference_caption": "a", "modification": "b"})
    finally:
        llm.close()
    assert "response_format" not in server.requests[0].json


def test_yes_no_task_is_checked(server):
    server.script(
        CHAT, [Step(json=chat_completion("I think maybe.")), Step(json=chat_completion("No, the sleeves differ."))]
    )
    llm = make_llm(server)
    img = Image.new("RGB", (8, 8), (200, 10, 10))
    try:
        out = llm.run_task("entail", {"statement": "s", "caption": "c"})
    finally:
        llm.close()
    assert out == "No, the sleeves differ."
    assert server.requests[1].json["messages"][-1]["content"].endswith("Reply again with only one word: true or false.")
    assert "response_format" not in server.requests[0].json
    del img


def test_tool_calls_round_trip(server):
    tools = [
        {
            "name": "image_search",
            "description": "search photos",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "top_k": {"type": "integer"}}},
        }
    ]
    server.script(
        CHAT,
        [
            Step(
                json=chat_completion(
                    None,
                    tool_calls=[
                        {"id": "call_a", "name": "image_search", "arguments": {"query": "red cat", "top_k": 5}},
                        {"id": "call_b", "name": "image_search", "arguments": "{'query': 'Rome', 'top_k': 3,}"},
                    ],
                )
            ),
            Step(json=chat_completion("Found them.")),
        ],
    )
    llm = make_llm(server)
    try:
        msgs = [user_message("find the red cat in Rome")]
        reply = llm.chat(msgs, tools=tools)
        assert [(t.id, t.name, t.arguments) for t in reply.tool_calls] == [
            ("call_a", "image_search", {"query": "red cat", "top_k": 5}),
            ("call_b", "image_search", {"query": "Rome", "top_k": 3}),
        ]
        assert reply.text == ""
        msgs += [
            assistant_message(reply),
            tool_message("call_a", {"ids": ["p1", "p2"]}),
            tool_message("call_b", "none"),
        ]
        final = llm.chat(msgs, tools=tools)
    finally:
        llm.close()
    assert final.text == "Found them."
    first, second = server.requests
    assert first.json["tools"] == [
        {
            "type": "function",
            "function": {"name": "image_search", "description": "search photos", "parameters": tools[0]["parameters"]},
        }
    ]
    sent = second.json["messages"]
    assert sent[1]["role"] == "assistant" and sent[1]["tool_calls"][0] == {
        "id": "call_a",
        "type": "function",
        "function": {"name": "image_search", "arguments": '{"query": "red cat", "top_k": 5}'},
    }
    assert sent[2] == {"role": "tool", "tool_call_id": "call_a", "content": '{"ids": ["p1", "p2"]}'}
    assert sent[3] == {"role": "tool", "tool_call_id": "call_b", "content": "none"}


def test_tool_call_with_unparseable_arguments(server):
    server.script(CHAT, Step(json=chat_completion(None, tool_calls=[{"name": "view_photos", "arguments": "ids=[1,2"}])))
    llm = make_llm(server)
    try:
        with pytest.raises(ReplyParseError, match="arguments of tool call 'view_photos'"):
            llm.chat([user_message("x")], tools=[{"name": "view_photos", "parameters": {"type": "object"}}])
    finally:
        llm.close()


def test_bad_tools_and_messages_are_input_errors(server):
    llm = make_llm(server)
    try:
        with pytest.raises(InputError, match="tool 0 is not a function spec"):
            llm.chat([user_message("x")], tools=[{"parameters": {}}])
        with pytest.raises(InputError, match="message 0 has role 'robot'"):
            llm.chat([{"role": "robot", "content": "x"}])
        with pytest.raises(InputError, match="tool message 0 lacks 'tool_call_id'"):
            llm.chat([{"role": "tool", "content": "x"}])
    finally:
        llm.close()
    assert server.requests == []


def test_image_message_arrives_as_a_resized_data_url(server, tmp_path):
    path = tmp_path / "wide.png"
    Image.new("RGB", (1000, 500), (10, 120, 200)).save(path)
    server.script(CHAT, Step(json=chat_completion("a blue rectangle")))
    llm = make_llm(server, image_max_side=64, image_quality=80, image_detail="low")
    try:
        assert llm.run_task("caption", {}, images=[path]) == "a blue rectangle"
    finally:
        llm.close()
    content = server.requests[0].json["messages"][0]["content"]
    assert content[0]["type"] == "text" and "Describe" in content[0]["text"]
    part = content[1]
    assert part["type"] == "image_url" and part["image_url"]["detail"] == "low"
    url = part["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    im = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert im.format == "JPEG" and im.size == (64, 32)
    r, g, b = im.convert("RGB").getpixel((32, 16))
    assert abs(r - 10) < 12 and abs(g - 120) < 12 and abs(b - 200) < 12


def test_missing_image_is_named(server, tmp_path):
    llm = make_llm(server)
    try:
        with pytest.raises(InputError, match=r"image '.*nope.jpg': file not found"):
            llm.run_task("caption", {}, images=[tmp_path / "nope.jpg"])
        with pytest.raises(InputError, match=r"LLM task 'caption' needs image\(s\) \[image\], got none"):
            llm.run_task("caption", {})
    finally:
        llm.close()


def test_concurrency_is_bounded(server):
    active = {"now": 0, "max": 0}
    lock = threading.Lock()

    def slow(req):
        with lock:
            active["now"] += 1
            active["max"] = max(active["max"], active["now"])
        time.sleep(0.15)
        with lock:
            active["now"] -= 1
        return Step(json=chat_completion(req.json["messages"][0]["content"].upper()))

    server.script(CHAT, slow)
    llm = make_llm(server, concurrency=2)

    async def main():
        return await asyncio.gather(*(llm.achat([user_message(f"q{i}")]) for i in range(6)))

    try:
        replies = asyncio.run(main())
    finally:
        llm.close()
    assert [r.text for r in replies] == [f"Q{i}" for i in range(6)]
    assert active["max"] == 2


def test_sync_chat_inside_a_running_event_loop(server):
    server.script(CHAT, Step(json=chat_completion("from inside")))
    llm = make_llm(server)

    async def main():
        return llm.chat([user_message("x")]).text, llm.run_task(
            "rewrite_caption", {"reference_caption": "a", "modification": "b"}
        )

    server.script(CHAT, [Step(json=chat_completion("from inside")), Step(json=chat_completion('{"caption": "c"}'))])
    try:
        text, task = asyncio.run(main())
    finally:
        llm.close()
    assert text == "from inside" and json.loads(task) == {"caption": "c"}


def test_run_context_calls_are_cached(server, tmp_path):
    server.script(CHAT, Step(json=chat_completion('{"caption": "a blue dress"}')))
    llm = make_llm(server)
    ctx = RunContext(cache=CallCache(tmp_path / "c.sqlite"), run_dir=None)
    v = {"reference_caption": "a red dress", "modification": "make it blue"}

    async def twice():
        a = await ctx.call(llm, "run_task", task="rewrite_caption", variables=v)
        b = await ctx.call(llm, "run_task", task="rewrite_caption", variables=v)
        return a, b

    try:
        a, b = asyncio.run(twice())
    finally:
        llm.close()
    assert a == b == '{"caption": "a blue dress"}' and len(server.requests) == 1


def test_identity_is_the_served_model_not_the_url_or_key(server):
    a = make_llm(server)
    b = make_llm(server, model="other-model")
    c = make_llm(server, api_key="sk-another", timeout=9.0, retries=0, concurrency=3)
    d = make_llm(server, base_url="http://127.0.0.1:1/v1")  # the same model, reached elsewhere
    e = make_llm(server, temperature=0.7)
    f = make_llm(server, revision="2026-01-01")  # the same name, other weights (declared)
    try:
        assert a.identity != b.identity and a.identity != e.identity and a.identity != f.identity
        assert a.identity == c.identity == d.identity
        assert f.model_identity().endswith("@2026-01-01")
        assert "sk-secret" not in a.model_identity() and "sk-secret" not in a.describe()
    finally:
        for x in (a, b, c, d, e, f):
            x.close()


def test_credentials_in_the_url_never_reach_the_identity():
    llm = LLMS.build("openai", {"base_url": "https://user:pw@example.com/v1?key=abc", "model": "m"})
    assert llm.model_identity() == "m" and "pw" not in llm.identity


def test_bad_config_is_named():
    with pytest.raises(ConfigError, match="field 'response_format': must be one of json_object, none"):
        LLMS.build("openai", {"response_format": "yaml"})
    with pytest.raises(InputError, match="base_url 'ftp://x' is not an http"):
        LLMS.build("openai", {"base_url": "ftp://x"})
    with pytest.raises(ConfigError, match="field 'concurrency': must be at least 1, got 0"):
        LLMS.build("openai", {"base_url": "http://localhost:1/v1", "concurrency": 0})


def test_backoff_and_retry_after_helpers():
    import random

    rng = random.Random(0)
    delays = [backoff_delay(a, 0.5, 4.0, rng) for a in range(6)]
    for a, d in enumerate(delays):
        cap = min(4.0, 0.5 * 2**a)
        assert cap / 2 <= d <= cap
    assert retry_after_seconds({"retry-after": "2.5"}) == 2.5
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert retry_after_seconds({}) is None


def test_image_data_url_passes_urls_and_checks_settings(tmp_path):
    assert image_data_url("https://x/y.jpg") == "https://x/y.jpg"
    with pytest.raises(InputError, match="quality must be within 1..100"):
        image_data_url(tmp_path / "x.jpg", quality=0)
