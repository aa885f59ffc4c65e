"""run.preflight: every endpoint is checked (one GET /models) before any gallery or query work."""

from __future__ import annotations

import logging
import socket

import pytest

from agentcir.framework.preflight import EndpointUnavailable, check_endpoints
from agentcir.framework.recipe import compose
from agentcir.framework.runner import run_recipe
from agentcir.registry import GENERATORS, LLMS

pytest.importorskip("httpx", reason="needs the llm extra (the OpenAI client)")

from agentcir.components.llms.scripted_server import ScriptedServer, Step

MODELS = Step(json={"object": "list", "data": [{"id": "m", "object": "model"}, {"id": "other", "object": "model"}]})


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def llm(base_url: str, **cfg):
    return LLMS.build(
        "openai", {"base_url": base_url, "model": "m", "retries": 0, "api_key_env": "AGENTCIR_TEST_NO_KEY", **cfg}
    )


def test_a_listed_model_passes_with_one_request(monkeypatch):
    monkeypatch.delenv("AGENTCIR_TEST_NO_KEY", raising=False)
    with ScriptedServer() as srv:
        srv.script("/models", MODELS)
        a, b = llm(srv.base_url), llm(srv.base_url, temperature=0.5)  # the same endpoint: asked once
        assert check_endpoints([a, b, object()]) == []
        assert [r.path for r in srv.requests] == ["/v1/models"] and srv.requests[0].method == "GET"
        a.close(), b.close()


def test_the_key_is_sent_and_a_refused_key_is_named(monkeypatch):
    monkeypatch.setenv("AGENTCIR_TEST_KEY", "sk-test")
    with ScriptedServer() as srv:
        srv.script("/models", MODELS)
        client = llm(srv.base_url, api_key_env="AGENTCIR_TEST_KEY")
        check_endpoints([client])
        assert srv.requests[0].headers["authorization"] == "Bearer sk-test"
        srv.script("/models", Step(status=401, json={"error": {"message": "bad key"}}))
        with pytest.raises(
            EndpointUnavailable,
            match=r"/v1/models answered HTTP 401: the key given "
            r"\(api_key or \$AGENTCIR_TEST_KEY\) was refused",
        ):
            check_endpoints([llm(srv.base_url, api_key_env="AGENTCIR_TEST_KEY")])
        client.close()


def test_a_missing_key_is_named(monkeypatch):
    monkeypatch.delenv("AGENTCIR_TEST_NO_KEY", raising=False)
    with ScriptedServer() as srv:
        srv.script("/models", Step(status=401))
        with pytest.raises(
            EndpointUnavailable,
            match=f"{srv.base_url}/models answered HTTP 401: no API key is set: "
            f"set the environment variable AGENTCIR_TEST_NO_KEY",
        ):
            check_endpoints([llm(srv.base_url)])
    # the OpenAI API without a key: refused before any request
    with pytest.raises(
        EndpointUnavailable,
        match="https://api.openai.com/v1 needs an API key and no API key is set: "
        "set the environment variable AGENTCIR_TEST_NO_KEY",
    ):
        check_endpoints([llm("https://api.openai.com/v1")])
    monkeypatch.delenv("AGENTCIR_TEST_IMAGES_KEY", raising=False)
    gen = GENERATORS.build("openai_images", {"api_key_env": "AGENTCIR_TEST_IMAGES_KEY"})
    with pytest.raises(EndpointUnavailable, match="generator 'openai_images'.*AGENTCIR_TEST_IMAGES_KEY"):
        check_endpoints([gen])


def test_an_unreachable_host_is_named():
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(EndpointUnavailable, match=f"llm 'openai' \\(model m\\): the endpoint {url} does not answer"):
        check_endpoints([llm(url)], timeout=2.0)


def test_an_unlisted_model_or_no_model_list_is_a_warning(caplog):
    with ScriptedServer() as srv:
        srv.script("/models", MODELS)
        with caplog.at_level(logging.WARNING, logger="agentcir"):
            w = check_endpoints([llm(srv.base_url, model="missing-model")])
        assert len(w) == 1 and "does not list model 'missing-model' (it lists m, other)" in w[0]
        assert "does not list model 'missing-model'" in caplog.text
        srv.script("/models", Step(status=404))
        w = check_endpoints([llm(srv.base_url)])
        assert len(w) == 1 and "/models answered HTTP 404; the served models could not be listed" in w[0]


def test_a_run_fails_before_any_gallery_work(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    args = [
        "method=cirevl",
        "llm=openai",
        f"llm.base_url={url}",
        "llm.model=m",
        "llm.retries=0",
        f"run.root={tmp_path}",
        "run.progress=false",
        "dataset.limit=2",
    ]
    with pytest.raises(EndpointUnavailable, match=f"the endpoint {url} does not answer"):
        run_recipe(compose(args))
    assert not (tmp_path / "_galleries").exists()  # nothing was indexed
    assert not any(p.name.startswith("cirevl-") for p in tmp_path.iterdir())  # no run directory left
    # run.preflight=false: no check; the run fails on its first call instead (after indexing)
    r = compose([*args, "run.preflight=false"])
    assert r["run"]["preflight"] is False
