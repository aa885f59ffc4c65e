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
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]


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
    app = create_app(
        searcher, uploads=tmp / "up", thumbs=tmp / "thumbs", config=ServeConfig(warm_up=False), ask=ask_factory
    )
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
        pg.on(
            "console",
            lambda m: (
                m.type == "error" and "Content Security Policy" in m.text and pg.problems.append(f"CSP: {m.text}")
            ),
        )
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
    _expect(page.locator("#ref-img")).to_be_visible()  # waits: the page shows the file once it has read it
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
    page.select_option("#hits-per-page", "96")  # on one page
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
    assert set(ids) == {"albums/Trip 2019/rome1", "albums/Trip 2019/rome2"}  # every photo taken in Rome
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


def _visible_ids(page, grid: str = "#hits") -> list[str]:
    return page.eval_on_selector_all(f"{grid} figure.hit:not([hidden])", "els => els.map(e => e.dataset.id)")


def _search(page, text: str, k: int = 20):
    page.fill("#text", text)
    page.fill("#k", str(k))
    page.click("#go")
    _wait_results(page)


def test_pages_and_a_duplicate_group(page, server, gallery, artifacts):
    _, _, _, facts = gallery
    t0 = time.perf_counter()
    _open(page, server)
    _search(page, "a t-shirt", 100)
    page.select_option("#hits-per-page", "96")
    all_ids = _hit_ids(page)  # every hit, copies (hidden) included
    assert len(all_ids) == 39 and len(_visible_ids(page)) < 39
    group = page.locator("#hits figure.grouped", has=page.locator(f'xpath=self::*[@data-id="{facts["products"][0]}"]'))
    if not group.count():  # the TIFF copy may outrank the JPEG: then it leads
        group = page.locator(f'#hits figure.grouped[data-id="{facts["tiff"]}"]')
    lead = group.first
    assert lead.locator("button.dups").text_content() == "+1 copy"
    copy_id = facts["tiff"] if lead.get_attribute("data-id") == facts["products"][0] else facts["products"][0]
    copy = page.locator(f'#hits figure.copy[data-id="{copy_id}"]')
    _expect(copy).to_be_hidden()
    lead.locator("button.dups").click()  # expand: the copy shows, marked as one
    _expect(copy).to_be_visible()
    assert "copy of" in copy.text_content()
    lead.scroll_into_view_if_needed()
    _shot(page, artifacts, "09-duplicate-group")
    lead.locator("button.dups").click()
    _expect(copy).to_be_hidden()
    # pages: 12 pictures a page
    page.select_option("#hits-per-page", "12")
    first = _visible_ids(page)
    assert len(first) == 12
    _expect(page.locator("#hits-pager")).to_contain_text("page 1 of")
    page.click('#hits-pager button[data-page="2"]')
    _expect(page.locator('#hits-pager button[aria-current="page"]')).to_have_text("2")
    second = _visible_ids(page)
    assert len(second) == 12 and not set(first) & set(second)
    assert all_ids.index(second[0]) > all_ids.index(first[-1])  # in rank order
    _shot(page, artifacts, "10-page-2")
    assert not page.problems, page.problems
    print(f"groups and pages: {time.perf_counter() - t0:.1f} s")


def test_export_csv_and_zip(page, server, artifacts, tmp_path):
    import csv
    import zipfile

    _open(page, server)
    _search(page, "a blue shirt", 6)
    ids = _hit_ids(page)
    with page.expect_download() as d:
        page.click("#hits-export-csv")
    p = tmp_path / "r.csv"
    d.value.save_as(p)
    assert d.value.suggested_filename == "agentcir-results.csv"
    rows = list(csv.DictReader(p.open()))
    assert [r["id"] for r in rows] == ids and all(r["path"] for r in rows)
    with page.expect_download() as d:
        page.click("#hits-export-zip")
    z = tmp_path / "r.zip"
    d.value.save_as(z)
    names = zipfile.ZipFile(z).namelist()
    assert len([n for n in names if n.startswith("photos/")]) == len(ids) and "results.json" in names
    _expect(page.locator("#hits-tool-msg")).to_contain_text("ZIP of 6 results saved")
    assert not page.problems, page.problems


def test_breadcrumb_steps_restore_their_own_results(page, server, artifacts):
    _open(page, server)
    _search(page, "a blue shirt", 8)
    one = _hit_ids(page)
    _search(page, "a red dress", 8)
    two = _hit_ids(page)
    assert one != two
    page.click('#crumbs li[data-step="1"]')
    _expect(page.locator('#crumbs li[aria-current="step"]')).to_have_attribute("data-step", "1")
    assert _hit_ids(page) == one and page.input_value("#text") == "a blue shirt"
    _shot(page, artifacts, "11-breadcrumb-back")
    page.click('#crumbs li[data-step="2"]')
    assert _hit_ids(page) == two and page.input_value("#text") == "a red dress"
    page.click('#crumbs li[data-step="1"]')
    _search(page, "a green top", 8)  # a search from step 1 replaces the steps after it
    _expect(page.locator("#crumbs li")).to_have_count(2)
    assert "a green top" in page.text_content('#crumbs li[data-step="2"]')
    assert not page.problems, page.problems


def test_full_photo_and_plain_upload_error(page, server, artifacts, tmp_path):
    _open(page, server)
    _search(page, "a blue shirt", 4)
    page.locator("#hits figure.hit img").first.click()
    _expect(page.locator("#viewer")).to_be_visible()
    row = page.locator("#hits figure.hit").first.get_attribute("data-row")
    assert page.get_attribute("#viewer-img", "src") == f"/view/{row}"
    _expect(page.locator("#viewer-img")).not_to_have_class(re.compile("loading"))
    assert page.eval_on_selector("#viewer-img", "img => img.naturalWidth") > 0
    assert page.get_attribute("#viewer-download", "href") == f"/image/{row}?download=true"
    _shot(page, artifacts, "12-full-photo")
    page.click("#viewer-close")
    _expect(page.locator("#viewer")).to_be_hidden()
    bad = tmp_path / "holiday.jpg"
    bad.write_bytes(b"this is a text file, not a photo")
    page.set_input_files("#file", str(bad))
    page.fill("#text", "in red")
    page.click("#go")
    _expect(page.locator("#error")).to_contain_text("This file is not an image agentcir can read ('holiday.jpg'")
    err = page.text_content("#error")
    assert "Error" not in err and "rerun" not in err
    page.click("#ref-clear")
    _shot(page, artifacts, "13-plain-error")
    assert not page.problems, page.problems


def test_a_looped_method_shows_its_rounds(page, gallery, artifacts, tmp_path):
    """AutoCIR (planner, then corrector rounds): the trace view lists each round with its verdict and suggestions."""
    from agentcir.framework.recipe import compose
    from agentcir.framework.search import Searcher
    from agentcir.serve import ServeConfig, create_app

    folder, gdir, root, facts = gallery
    s = Searcher(compose([f"run.root={root}", "run.progress=false", "method=autocir"]), gdir)
    app = create_app(
        s, uploads=tmp_path / "up", thumbs=tmp_path / "th", config=ServeConfig(warm_up=False, prepare=False)
    )
    with running_app(app) as port:
        _open(page, f"http://127.0.0.1:{port}")
        page.set_input_files("#file", str(folder / f"{facts['products'][2]}.jpg"))
        page.fill("#text", "in red")
        page.click("#go")
        _wait_results(page)
        page.click("#trace-box summary")
        loop = page.locator("#loop li")
        _expect(loop).to_have_count(2)
        assert "plan" in loop.nth(0).text_content() and "searched with" in loop.nth(0).text_content()
        r1 = loop.nth(1).text_content()
        assert "round 1" in r1 and "verdict" in r1 and ("suggestions" in r1 or "stopped" in r1)
        assert "the loop of autocir" in page.text_content("#trace")
        _shot(page, artifacts, "14-loop-trace")
    assert not page.problems, page.problems


def test_a_photo_landing_in_the_watched_folder_appears_in_the_page(page, gallery, artifacts, tmp_path):
    """`serve --watch`: a photo copied into the folder while the page is open is found by the next
    search from the page (a crop of it as the reference, no text: "more like this")."""
    from PIL import Image

    from agentcir.framework.recipe import compose
    from agentcir.framework.search import Searcher
    from agentcir.serve import ServeConfig, create_app

    folder, gdir, _, _ = gallery
    photos, g2 = tmp_path / "photos", tmp_path / "g"
    shutil.copytree(folder, photos)
    shutil.copytree(gdir, g2)
    s = Searcher(compose([f"run.root={tmp_path}", "run.progress=false"]), g2)
    app = create_app(
        s,
        uploads=tmp_path / "up",
        thumbs=tmp_path / "th",
        config=ServeConfig(warm_up=False, prepare=False, reload_s=0.1),
    )
    st = app.state.serve
    generation = lambda: st.status()["gallery"]["generation"]
    try:
        with running_app(app) as port:
            _open(page, f"http://127.0.0.1:{port}")
            st.watch(photos, debounce_s=0.2, settle_s=0.3, observer="polling", poll_s=0.05)
            end = time.monotonic() + 60
            while generation() < 1 and time.monotonic() < end:  # the copied folder's first update
                time.sleep(0.05)
            before, n = generation(), len(s.gallery)
            new = sorted((ROOT / "agentcir" / "data" / "demo" / "images").iterdir())[40]
            t0 = time.monotonic()
            shutil.copy(new, photos / "arrived.jpg")
            end = time.monotonic() + 60
            while not (generation() > before and len(s.gallery) == n + 1) and time.monotonic() < end:
                time.sleep(0.05)
            assert len(s.gallery) == n + 1, "the new photo was not indexed"
            landed = time.monotonic() - t0
            im = Image.open(new).convert("RGB")
            w, h = im.size
            crop = tmp_path / "crop.jpg"
            im.crop((w // 10, h // 10, w - w // 10, h - h // 10)).save(crop, "JPEG")
            page.set_input_files("#file", str(crop))
            _expect(page.locator("#ref-img")).to_be_visible()
            page.fill("#text", "")
            page.click("#go")
            _wait_results(page)
            assert _hit_ids(page)[0] == "arrived"
            _shot(page, artifacts, "15-watched-photo")
            print(f"landing -> indexed: {landed:.1f} s; then found from the page")
    finally:
        st.close()
    assert not page.problems, page.problems
