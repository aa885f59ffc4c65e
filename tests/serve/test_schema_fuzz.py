"""The API fuzzed from its own OpenAPI schema (schemathesis, bounded examples): no request answers 5xx,
and every answer matches the documented schema."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis (the dev extra) is not installed")
from hypothesis import HealthCheck, given, settings  # noqa: E402

from .conftest import make_client  # noqa: E402

EXAMPLES = 10  # per operation: ~2 s each on 2 cores (a search runs the whole method)


def test_no_request_answers_5xx(searcher, ask_factory, tmp_path):
    app = make_client(searcher, ask_factory, tmp_path, allow_hosts=("testserver",)).app  # schemathesis' Host
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    ops = [r.ok() for r in schema.get_all_operations()]
    assert {op.path for op in ops} >= {"/api/search", "/api/ask", "/api/info", "/api/progress", "/thumb/{row}"}
    seen: dict[str, set[int]] = {}
    for op in ops:

        @given(case=op.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case):
            response = case.call()
            seen.setdefault(op.label, set()).add(response.status_code)
            assert response.status_code < 500, (case.method, case.path, response.status_code, response.text[:300])
            case.validate_response(
                response,
                checks=[schemathesis.checks.not_a_server_error, schemathesis.checks.response_schema_conformance],
            )

        check()
    assert len(seen) == len(ops)
