"""Real-browser tests (marker browser): headless Chromium (Debian's package) driven by Playwright opens each
explorer served by Voila on 127.0.0.1, changes a control and checks the displayed result; and opens the
rendered HTML book from disk. Screenshots go to _build/test-artefacts/.

Without Chromium the tests are skipped, unless REQUIRE_BROWSER=1 (set by .ci/run), which makes them fail."""

import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest
from playwright.sync_api import expect, sync_playwright

from albert_edu.corpus import load_documents
from albert_edu.explorers import budget_text, pair_html, pair_view
from albert_edu.tokenizer import Tokenizer
from albert_edu.tools.explore import serve_command, write_notebooks
from albert_edu.tools.html import build_html
from albert_edu.tools.manifest import BUILD, ROOT, kernel_env, load_book

pytestmark = pytest.mark.browser
ARTEFACTS = BUILD / "test-artefacts"


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def browser():
    executable = chromium_path()
    if executable is None:
        message = "Chromium (Debian package chromium) is needed for the browser tests"
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(message + "; REQUIRE_BROWSER=1")
        pytest.skip(message)
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def explorers(tmp_path_factory):
    """Voila serving the three explorers on a free loopback port; stopped (by its PID) after the tests."""
    folder = tmp_path_factory.mktemp("explore")
    write_notebooks(folder)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **kernel_env(load_book()), "PYTHONPATH": str(ROOT)}
    log = open(folder / "voila.log", "w")
    server = subprocess.Popen(serve_command(port, folder), env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/voila/render"
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail(f"Voila did not start: {(folder / 'voila.log').read_text()[-2000:]}")
            time.sleep(0.5)
    yield base
    server.terminate()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


def open_explorer(browser, url):
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(url, timeout=90_000)
    result = page.locator(".explorer-result")
    result.wait_for(timeout=180_000)
    return page, result


def wait_for_text(result, expected: str) -> None:
    """Playwright's waiting assertion: retries until the explorer shows `expected`, fails after 30 s."""
    expect(result).to_have_text(expected, timeout=30_000)


def test_parameter_explorer_follows_a_dropdown_and_a_slider(browser, explorers):
    page, result = open_explorer(browser, f"{explorers}/parameters.ipynb")
    wait_for_text(result, budget_text(30000, 128, 768, 12, "all"))
    page.locator(".widget-dropdown", has_text="sharing").locator("select").select_option("none")
    wait_for_text(result, budget_text(30000, 128, 768, 12, "none"))
    handle = page.locator(".widget-hslider").filter(has=page.locator("label", has_text=re.compile(r"^L$")))
    handle = handle.locator(".noUi-handle")
    handle.focus()
    for _ in range(12):
        handle.press("ArrowRight")
    wait_for_text(result, budget_text(30000, 128, 768, 24, "none"))
    page.screenshot(path=str(ARTEFACTS / "explorer-parameters.png"), full_page=True)
    page.close()


def test_masking_explorer_follows_the_objective_and_the_seed(browser, explorers):
    documents, tokenizer = load_documents("validation"), Tokenizer.load()
    page, result = open_explorer(browser, f"{explorers}/masking.ipynb")
    page.locator(".widget-dropdown", has_text="objective").locator("select").select_option("nsp")
    seed = page.locator(".widget-text", has_text="seed").locator("input")
    seed.fill("7")
    seed.press("Enter")
    view = pair_view(documents, tokenizer, 0, "nsp", 7)
    first_line = re.search(r'<p class="explorer-result">(.*?)</p>', pair_html(view)).group(1)
    wait_for_text(result, first_line)
    shown = page.locator("span[title]").count()
    assert shown == len(view["predict"])
    page.screenshot(path=str(ARTEFACTS / "explorer-masking.png"), full_page=True)
    page.close()


def test_layer_explorer_follows_the_model_and_the_layer(browser, explorers):
    page, result = open_explorer(browser, f"{explorers}/layers.ipynb")
    before = result.inner_text()
    page.locator(".widget-dropdown", has_text="model").locator("select").select_option("ALBERT-style, random init")
    handle = page.locator(".widget-hslider", has_text="layer").locator(".noUi-handle")
    handle.focus()
    handle.press("ArrowRight")
    handle.press("ArrowRight")
    expect(result).to_have_text(re.compile(r"^layer 3:"), timeout=30_000)
    expect(result).not_to_have_text(before)
    page.locator("img").first.wait_for(timeout=30_000)  # the curves are drawn
    assert page.locator("img").first.evaluate("img => img.naturalWidth > 100")
    page.screenshot(path=str(ARTEFACTS / "explorer-layers.png"), full_page=True)
    page.close()


def test_fill_mask_explorer_follows_the_text_and_the_model(browser, explorers):
    page, result = open_explorer(browser, f"{explorers}/fill-mask.ipynb")
    expect(result).to_have_text(re.compile(r"^1 mask: \[MASK\] 1: "), timeout=30_000)
    box = page.locator(".widget-text", has_text="text").locator("input")
    box.fill("the [MASK] of [MASK] is paris.")
    box.press("Enter")
    expect(result).to_have_text(re.compile(r"^2 masks: \[MASK\] 1: .* \| \[MASK\] 2: "), timeout=30_000)
    expect(page.locator("code")).to_have_count(10)  # five pieces for each mask, with their bars
    handle = page.locator(".widget-hslider", has_text="top k").locator(".noUi-handle")
    handle.focus()
    handle.press("ArrowLeft")
    expect(page.locator("code")).to_have_count(8, timeout=30_000)  # k = 4
    select = page.locator(".widget-dropdown", has_text="model").locator("select")
    options = select.locator("option").all_inner_texts()
    assert len(options) == 5  # the book's ALBERT, the three 200-step runs (committed checkpoints) and a random model
    before = result.inner_text()
    select.select_option(options[-1] if select.input_value() != options[-1] else options[0])
    expect(result).not_to_have_text(before, timeout=30_000)
    page.screenshot(path=str(ARTEFACTS / "explorer-fill-mask.png"), full_page=True)
    box.fill("a text without a mask")
    box.press("Enter")
    expect(result).to_have_text(re.compile(r"has no \[MASK\]"), timeout=30_000)
    page.close()


def test_the_html_book_works_from_disk(browser):
    index = build_html(load_book(), execute_chapters=False)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(index.as_uri())
    toc = [t.strip() for t in page.locator(".toctree-wrapper a").all_inner_texts()]
    chapters = load_book().chapters
    assert len(toc) == len(chapters) and all(any(c.title.split(":")[0] in t for t in toc) for c in chapters), toc
    page.goto((index.parent / "01_parameter_budget.html").as_uri())
    page.locator("mjx-container").first.wait_for(state="attached", timeout=30_000)  # MathJax (local) ran
    rendered = page.evaluate("[...document.querySelectorAll('article mjx-container')].filter(m => m.getBoundingClientRect().width > 0).length")
    assert rendered > 0, "no formula rendered in the chapter's text"
    figure = page.locator("div.cell_output img").first
    figure.scroll_into_view_if_needed()
    assert figure.evaluate("img => img.complete && img.naturalWidth > 100")
    assert page.locator(".admonition", has_text="Run this chapter").count() == 1
    page.screenshot(path=str(ARTEFACTS / "book-chapter-1.png"))
    page.close()
