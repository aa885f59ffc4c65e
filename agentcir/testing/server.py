"""A real HTTP server on 127.0.0.1 that speaks the OpenAI wire format with scripted replies.

For tests and offline demos of everything that talks to an OpenAI-compatible endpoint
(the chat client, the images-API generator and editor, agent loops with tool calls). Standard
library only; it listens on loopback only.

From the command line it answers every LLM task, the built-in ones and those plugins register
(:mod:`agentcir.testing.replies`), on a fixed port, so a run can be killed, the server restarted
and the run resumed against the same ``base_url``::

    python -m agentcir.testing.server --port 8011 --replier my_plugin.replies:reply
    agentcir run llm=openai llm.base_url=http://127.0.0.1:8011/v1 llm.model=scripted ...

``--replier module:function`` imports ``module`` (which may register tasks) and asks
``function(task, variables)`` first (``None``: not answered, the next replier is asked);
``--replier module`` only imports it (its tasks' own repliers answer). ``--delay`` slows every
reply, ``--accept`` is the share of yes/true answers to the built-in judgement tasks.

    with ScriptedServer() as srv:
        srv.script("/chat/completions", [Step(status=429, headers={"Retry-After": "0"}),
                                         Step(json=chat_completion("hello"))])
        llm = LLMS.build("openai", {"base_url": srv.base_url, "model": "m"})
        assert llm.chat([user_message("hi")]).text == "hello"
        assert len(srv.requests) == 2

A path's script is consumed in order; once used up, its last step repeats. A step may be
a callable ``f(request) -> Step`` to answer from the request's content.

Faults for reliability tests (``benchmarks/fault_sweep.py``): a step's ``fault`` is ``reset``
(the connection is closed without a reply) or ``truncate`` (the headers promise the whole body,
half of it is sent, then the connection closes); 429/500/503 are plain statuses (with a
``Retry-After`` header where wanted), a hang is a long ``delay``, prose is a ``text/plain``
``body``, empty choices are ``json={"choices": []}``. ``ScriptedServer(delay=s)`` delays every
reply (a slow endpoint), and :meth:`ScriptedServer.counts` counts requests by body, so a test
sees which calls were repeated.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Callable

from .wire import FAULTS, Request, Script, Step, chat_completion, error_body, image_edit_reply, multipart_fields

if TYPE_CHECKING:  # pragma: no cover
    from collections import Counter

__all__ = [
    "FAULTS",
    "Request",
    "Script",
    "ScriptedServer",
    "Step",
    "chat_completion",
    "error_body",
    "image_edit_reply",
    "load_replier",
    "main",
    "multipart_fields",
]


class _Server(ThreadingHTTPServer):
    request_queue_size = 512  # listen backlog: a pipeline opens one connection per call slot at once

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):  # a killed client is no error
            super().handle_error(request, client_address)


class ScriptedServer:
    """Threaded HTTP server on ``127.0.0.1`` (``port``, or a free one) answering from per-path scripts.

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1``.
        requests: every request received, in order.
    """

    def __init__(self, prefix: str = "/v1", *, delay: float = 0.0, port: int = 0):
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"ScriptedServer: port must be 0 (a free one) or 1..65535, got {port!r}")
        self.prefix = prefix.rstrip("/")
        self.port = port  #: the port asked for (0: a free one; :attr:`base_url` has the one bound)
        self.delay = delay  #: seconds added before every reply (a slow endpoint)
        self.inflight = 0  #: requests received and not yet answered
        self.requests: list[Request] = []
        self._scripts: dict[str, list[Script]] = {}
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "start the server first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}{self.prefix}"

    def script(self, path: str, steps: list[Script] | Script) -> None:
        """Set the answers of ``path`` (relative to the prefix, e.g. ``/chat/completions``)."""
        with self._lock:
            self._scripts["/" + path.strip("/")] = list(steps) if isinstance(steps, list) else [steps]

    def counts(self, path: str | None = None) -> "Counter[bytes]":
        """How many times each distinct request body was received (at ``path``, or anywhere)."""
        from collections import Counter

        with self._lock:
            reqs = list(self.requests)
        return Counter(r.body for r in reqs if path is None or r.path == self.prefix + "/" + path.strip("/"))

    def requests_to(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.path == self.prefix + "/" + path.strip("/")]

    def _next(self, req: Request) -> Step:
        rel = req.path[len(self.prefix) :] if req.path.startswith(self.prefix) else req.path
        with self._lock:
            steps = self._scripts.get(rel.split("?")[0])
            if not steps:
                return Step(status=404, json=error_body(f"no script for {req.path}", "not_found"))
            step = steps.pop(0) if len(steps) > 1 else steps[0]
        return step(req) if callable(step) else step

    def start(self) -> "ScriptedServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms delayed-ACK stalls)

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _handle(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                try:
                    payload = json.loads(body) if body else None
                except ValueError:
                    payload = None
                req = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body, payload)
                with server._lock:
                    server.requests.append(req)
                    server.inflight += 1
                try:
                    self._answer(server._next(req))
                finally:
                    with server._lock:
                        server.inflight -= 1

            def _answer(self, step: Step) -> None:
                if step.delay or server.delay:
                    time.sleep(step.delay + server.delay)
                data = (
                    step.body
                    if step.body is not None
                    else json.dumps(step.json if step.json is not None else {}).encode()
                )
                try:
                    if step.fault == "reset":
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    self.send_response(step.status)
                    self.send_header("Content-Type", step.content_type)
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in step.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    if step.fault == "truncate":
                        self.wfile.write(data[: len(data) // 2])
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    self.wfile.write(data)
                except OSError:  # the client gave up (a timeout test)
                    pass

            do_POST = do_GET = _handle

        try:
            self._httpd = _Server(("127.0.0.1", self.port), Handler)
        except OSError as e:
            raise OSError(e.errno, f"scripted server: cannot listen on 127.0.0.1:{self.port}: {e.strerror}") from None
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "ScriptedServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def load_replier(spec: str) -> Callable[[str | None, dict], Any] | None:
    """``module:function`` -> the function (after importing the module); ``module`` -> ``None``
    (the module is imported: the tasks it registers answer with their own repliers)."""
    import importlib

    module, _, name = spec.partition(":")
    if not module.strip():
        raise ValueError(f"--replier must be module or module:function, got {spec!r}")
    try:
        mod = importlib.import_module(module.strip())
    except ImportError as e:
        raise ValueError(f"--replier {spec!r}: cannot import module '{module}': {e}") from None
    if not name:
        return None
    fn = getattr(mod, name.strip(), None)
    if not callable(fn):
        raise ValueError(f"--replier {spec!r}: module '{module}' has no function '{name}'")
    return fn


def main(argv: list[str] | None = None) -> int:
    """``python -m agentcir.testing.server``: answer LLM tasks on 127.0.0.1 until interrupted."""
    import argparse
    import signal
    import sys

    from .replies import task_replier

    ap = argparse.ArgumentParser(
        prog="python -m agentcir.testing.server",
        description="A scripted OpenAI-compatible endpoint on 127.0.0.1 answering every "
        "LLM task (built in and registered by plugins) deterministically.",
    )
    ap.add_argument("--port", type=int, default=0, help="port to listen on (0: a free one, printed)")
    ap.add_argument(
        "--replier",
        action="append",
        default=[],
        metavar="MODULE[:FUNCTION]",
        help="import MODULE; FUNCTION(task, variables) answers first (repeatable)",
    )
    ap.add_argument("--delay", type=float, default=0.0, help="seconds before every reply")
    ap.add_argument("--accept", type=float, default=0.5, help="share of yes/true answers to judgement tasks")
    ap.add_argument("--model", default="scripted", help="model name in the replies and in GET /v1/models")
    args = ap.parse_args(argv)
    if not 0.0 <= args.accept <= 1.0:
        ap.error(f"--accept must be within 0..1, got {args.accept}")
    try:
        repliers = [fn for fn in (load_replier(s) for s in args.replier) if fn is not None]
    except ValueError as e:
        ap.error(str(e))
    srv = ScriptedServer(delay=args.delay, port=args.port)
    srv.script("/chat/completions", task_replier(accept=args.accept, repliers=repliers, model=args.model))
    srv.script("/models", Step(json={"object": "list", "data": [{"id": args.model, "object": "model"}]}))
    try:
        srv.start()
    except OSError as e:
        print(f"error: {e.strerror or e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"serving {srv.base_url}", flush=True)
    try:
        stop.wait()
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
