"""The web page in a real browser: Debian's headless chromium driven by Playwright for Python.

It clicks through what a person does: upload a reference and search, use a result as the next
reference, a text-only search, a history question with its steps; a gallery file named like an
HTML tag shows as text and runs nothing; no request answers 5xx; nothing breaks the page's
content security policy. A screenshot of each step is written under ``tmp/artifacts/serve-browser``
(or ``$AGENTCIR_ARTIFACTS/serve-browser``); the path is printed.

Without chromium the tests skip, except when ``CI=true``: there they fail (``.ci/run`` installs it).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from .conftest import ROOT, XSS_NAME, running_app

CHROMIUM = os.environ.get("AGENTCIR_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


def _need_browser():
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install playwright)")
    if not Path(CHROMIUM).is_file():
        missing.append(f"chromium at {CHROMIUM} (apt-get install -y chromium)")
    if missing:
        msg = "browser tests need " + " and ".join(missing)
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg + " (CI=true: not skipped)")
        pytest.skip(msg)


@pytest.fixture(scope="module")
def artifacts() -> Path:
    d = Path(os.environ.get("AGENTCIR_ARTIFACTS", ROOT / "tmp" / "artifacts")) / "serve-browser"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    print(f"\nbrowser screenshots: {d}")
    return d


@pytest.fixture(scope="module")
def server(searcher, ask_factory, tmp_path_factory):
    """The app under uvicorn on a free local port, in a thread."""
    from agentcir.serve import ServeConfig, create_app

    tmp = tmp_path_factory.mktemp("browser")
    app = create_app(searcher, uploads=tmp / "up", thumbs=tmp / "thumbs", config=ServeConfig(warm_up=False), ask=ask_factory)
    with running_app(app) as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def page(server, artifacts):
    _need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        pg = ctx.new_page()
        pg.set_default_timeout(20_000)
        pg.problems = []  # 5xx answers, dialogs (an alert would be injected script), CSP violations, page errors
        pg.on("response", lambda r: r.status >= 500 and pg.problems.append(f"{r.status} {r.url}"))
        pg.on("dialog", lambda d: (pg.problems.append(f"dialog: {d.message}"), d.dismiss()))
        pg.on("pageerror", lambda e: pg.problems.append(f"page error: {e}"))
        pg.on("console", lambda m: m.type == "error" and "Content Security Policy" in m.text
              and pg.problems.append(f"CSP: {m.text}"))
        yield pg
        browser.close()


def _shot(page, artifacts: Path, name: str) -> None:
    page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)


def _hit_ids(page, grid: str = "#hits") -> list[str]:
    return page.eval_on_selector_all(f"{grid} figure.hit", "els => els.map(e => e.dataset.id)")


def _expect(locator):
    from playwright.sync_api import expect

    return expect(locator)


def _wait_results(page, status: str = "#status"):
    # locator waits (the page's CSP forbids the string evaluation of wait_for_function)
    _expect(page.locator(status)).to_have_text(re.compile(r"(results|photo\(s\)) in "), timeout=30_000)


def _open(page, server):
    page.goto(server + "/")
    _expect(page.locator("#info")).to_have_text(re.compile(r"^Gallery "))


def test_upload_results_refine_by_click(page, server, gallery, artifacts, searcher):
    folder, _, _, facts = gallery
    t0 = time.perf_counter()
    _open(page, server)
    _shot(page, artifacts, "01-start")
    ref = folder / f"{facts['products'][0]}.jpg"
    page.set_input_files("#file", str(ref))
    _expect(page.locator("#ref-img")).to_be_visible()   # waits: the page shows the file once it has read it
    page.fill("#text", "in red")
    page.fill("#k", "12")
    page.click("#go")
    _wait_results(page)
    ids = _hit_ids(page)
    assert len(ids) == 12 and facts["products"][0] not in ids
    assert page.get_attribute("#ref-img", "src").startswith("/upload/")  # the server's thumbnail of the upload
    assert page.locator("#crumbs li").count() == 1
    _shot(page, artifacts, "02-upload-results")
    # click the third result: it becomes the reference, a new search from it
    third = ids[2]
    page.locator("#hits figure.hit").nth(2).locator("button.pick").click()
    assert f"/thumb/{searcher.gallery.index_of(third)}" in page.get_attribute("#ref-img", "src")
    page.fill("#text", "in blue")
    page.click("#go")
    _expect(page.locator("#crumbs li")).to_have_count(2, timeout=30_000)
    new_ids = _hit_ids(page)
    assert new_ids and third not in new_ids and new_ids != ids
    assert "in blue" in page.text_content("#crumbs li:nth-child(2)")
    _shot(page, artifacts, "03-refined-results")
    page.click("#trace-box summary")
    trace = page.text_content("#trace")
    for words in ("Reference caption", "Target description", "Textual proxies", "model calls and cache hits"):
        assert words in trace, words
    assert page.locator("#trace img.proxy").count() in (0, 1)
    _shot(page, artifacts, "04-trace")
    assert not page.problems, page.problems
    print(f"upload -> refine flow: {time.perf_counter() - t0:.1f} s")


def test_text_only_search(page, server, artifacts):
    _open(page, server)
    page.fill("#text", "a blue shirt")
    page.click("#go")
    _wait_results(page)
    assert "text retrieval" in page.text_content("#note") and len(_hit_ids(page)) == 20
    _shot(page, artifacts, "05-text-only")
    assert not page.problems, page.problems


def test_a_file_named_like_html_shows_as_text(page, server, gallery, artifacts):
    folder, _, _, facts = gallery
    _open(page, server)
    page.fill("#text", "a t-shirt")
    page.fill("#k", "100")  # the whole gallery
    page.click("#go")
    _wait_results(page)
    assert XSS_NAME in _hit_ids(page)
    card = page.locator("#hits figure.hit", has_text=XSS_NAME).first
    assert card.locator(".id").text_content() == XSS_NAME  # shown as text
    assert page.locator('img[src="x"]').count() == 0  # never parsed as markup
    card.scroll_into_view_if_needed()
    _shot(page, artifacts, "06-html-named-file")
    assert not page.problems, page.problems


def test_history_question_answer_and_steps(page, server, artifacts):
    _open(page, server)
    page.click("#tab-ask")
    page.fill("#question", "photos from Rome")
    page.click("#ask-go")
    _wait_results(page, "#ask-status")
    ids = _hit_ids(page, "#answer")
    assert set(ids) == {"albums/Trip 2019/rome1", "albums/Trip 2019/rome2"}   # every photo taken in Rome
    meta = page.text_content("#answer figure.hit dl.meta")
    assert "Rome, Italy" in meta and "NIKON D750" in meta and "2019-05-0" in meta and "albums/Trip 2019" in meta
    steps = page.locator("#steps li")
    assert steps.count() >= 2 and "filter_metadata(" in steps.first.text_content()
    assert "kept 2 photos as subset" in page.text_content("#steps")
    assert "in the answer" in page.text_content("#answer")  # no invented score
    _shot(page, artifacts, "07-history-question")
    assert not page.problems, page.problems


def test_api_docs_render_offline(page, server, artifacts):
    page.goto(server + "/docs")  # the Swagger UI files come from the server (fastapi-offline), not a CDN
    _expect(page.locator(".swagger-ui .info .title")).to_contain_text("agentcir")
    _expect(page.locator(".opblock-summary-path", has_text="/api/search")).to_have_count(1)
    _shot(page, artifacts, "08-api-docs")
    assert not page.problems, page.problems
