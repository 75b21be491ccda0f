"""The HTML reports as a reader meets them: in a real browser (Debian's chromium, driven by
chromium-driver through Selenium).

For the main job's page (`pto run scenes/heterogeneous_fanout.toml --report`), the same run with
scope stats, and a `pto tune` page: no console errors, nothing fetched, the summary chart and
table present and laid out as a table, nothing wider than the window, and for the main job a
full-page screenshot under 6,000 px. Screenshots are kept in target/browser/ for a human look.

Run: pip install selenium pytest pytest-timeout && pytest --timeout 600 tests/browser
Set PTO_BIN to use a built `pto` (default: `cargo run -p pto-cli`); without chromium and
chromedriver the tests skip, unless PTO_BROWSER_REQUIRED=1 (CI) makes that a failure.
"""

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "target" / "browser"
WIDTH = 1280
MAX_MAIN_HEIGHT = 6000
CASES = [
    "global_max_sizing", "per_task_sizing", "per_task_tuned", "per_task_on_small_chips",
    "global_max_on_small_chips",
]
STRATEGIES = CASES[:4]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def pto(*args, cwd):
    """Runs pto with args; returns its completed process (checked)."""
    cmd = os.environ.get("PTO_BIN")
    base = [cmd] if cmd else ["cargo", "run", "--quiet", "-p", "pto-cli", "--"]
    done = subprocess.run(
        base + list(args), cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    scene = str(ROOT / "scenes" / "heterogeneous_fanout.toml")
    pto("run", scene, "--report", str(out / "run.html"), cwd=ROOT)
    pto(
        "run", scene, "--enable-scope-stats", "--output", str(out / "diag"),
        "--report", str(out / "run_scope_stats.html"), cwd=ROOT,
    )
    pto("tune", scene, "--report", str(out / "tune.html"), cwd=ROOT)
    return out


@pytest.fixture(scope="module")
def browser():
    required = os.environ.get("PTO_BROWSER_REQUIRED") == "1"
    if not (CHROMIUM and DRIVER):
        if required:
            pytest.fail("chromium and chromedriver are required (apt-get install chromium chromium-driver)")
        pytest.skip("no chromium / chromedriver on PATH")
    if not required:
        pytest.importorskip("selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--window-size={WIDTH},1000",
    ]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(30)
    yield driver
    driver.quit()


def load(browser, path):
    """Opens a page; returns the console entries it produced."""
    browser.set_window_size(WIDTH, 1000)
    browser.get(path.as_uri())
    return browser.get_log("browser")


def js(browser, script):
    return browser.execute_script(script)


def png_height(path):
    with open(path, "rb") as f:
        header = f.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])[1]


def page_height(browser):
    return js(browser, "return document.documentElement.scrollHeight")


def screenshot(browser, name):
    """Keeps a full-page screenshot for a human look; returns its height in pixels."""
    height = page_height(browser)
    browser.set_window_size(WIDTH, height + 200)
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    assert browser.save_screenshot(str(path))
    return png_height(path)


def check_common(browser, entries):
    errors = [e for e in entries if e["level"] in ("SEVERE", "ERROR")]
    assert errors == [], errors
    assert js(browser, "return performance.getEntriesByType('resource').length") == 0
    assert js(browser, "return document.scripts.length") == 0
    # Nothing wider than the window (a table that overflows hides its last columns).
    overflow = js(
        browser,
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth",
    )
    assert overflow <= 0, f"the page is {overflow} px wider than the window"


def check_summary_table(browser, rows_expected):
    """The summary is a real table: display table, one row per case, columns side by side."""
    info = js(
        browser,
        """
        const t = document.querySelector('table.summary');
        if (!t) return null;
        const rows = [...t.tBodies[0].rows];
        return {
          display: getComputedStyle(t).display,
          rows: rows.length,
          lefts: [...rows[0].cells].map(c => c.getBoundingClientRect().left),
          tops: [...rows[0].cells].map(c => Math.round(c.getBoundingClientRect().top)),
          heads: [...t.tHead.rows[0].cells].map(c => c.textContent),
        };
        """,
    )
    assert info is not None, "no table.summary"
    assert info["display"] == "table"
    assert info["rows"] == rows_expected
    assert len(info["lefts"]) >= 6
    assert info["lefts"] == sorted(info["lefts"]) and len(set(info["lefts"])) == len(info["lefts"])
    assert len(set(info["tops"])) == 1, "the cells of a row are not on one line"
    return info


def check_chart(browser, labels):
    """The device-memory chart: drawn, with exactly these bar labels (cases) on the left, each
    bar's segments laid out left to right from the same edge."""
    chart = js(
        browser,
        """
        const s = document.querySelector('svg.strategies');
        if (!s) return null;
        const r = s.getBoundingClientRect();
        const segments = [...s.querySelectorAll('rect')].filter(x => x.getBBox().width > 0);
        return {
          width: r.width, height: r.height, segments: segments.length,
          starts: [...new Set(segments.map(x => Math.round(x.getBBox().x)))].length,
          labels: [...s.querySelectorAll('text.label')].map(t => t.textContent),
          texts: [...s.querySelectorAll('text:not(.label)')].map(t => t.textContent),
        };
        """,
    )
    assert chart is not None, "no svg.strategies"
    assert chart["width"] > 300 and chart["height"] > 40
    assert chart["labels"] == labels
    assert chart["segments"] >= len(labels)
    return chart


def test_main_job_page(browser, pages):
    entries = load(browser, pages / "run.html")
    check_common(browser, entries)
    info = check_summary_table(browser, rows_expected=5)
    assert info["heads"][:4] == ["case", "result", "tasks", "device memory"]
    # The expected failure did less work: not charted.
    chart = check_chart(browser, STRATEGIES)
    assert sum(t.endswith("the leanest") for t in chart["texts"]) == 1
    assert js(browser, "return document.querySelectorAll('table.waste tbody tr').length") >= 5
    # The case details are there, closed.
    closed = js(browser, "return [...document.querySelectorAll('details.case')].filter(d => !d.open).length")
    assert closed == 5
    height = page_height(browser)
    assert height < MAX_MAIN_HEIGHT, f"the main job's page is {height} px tall"
    shot = screenshot(browser, "run")
    assert shot < MAX_MAIN_HEIGHT, f"the main job's full-page screenshot is {shot} px tall"


def test_scope_stats_page_draws_occupancy_on_a_linear_axis(browser, pages):
    entries = load(browser, pages / "run_scope_stats.html")
    check_common(browser, entries)
    check_summary_table(browser, rows_expected=5)
    check_chart(browser, STRATEGIES)
    charts = js(
        browser,
        """
        return [...document.querySelectorAll('svg.overview')].map(s => ({
          labels: [...s.querySelectorAll('text')].map(t => t.textContent),
          height: s.getBoundingClientRect().height,
        }));
        """,
    )
    assert charts, "no occupancy overview"
    for c in charts:
        assert {"0%", "25%", "50%", "75%", "100%"} <= set(c["labels"])
        assert c["height"] > 50
    legend = js(browser, "return document.querySelector('#occupancy .legend').textContent")
    assert "task_window" in legend and "heap" in legend and "dep_pool" in legend
    screenshot(browser, "run_scope_stats")


def test_tune_page_shows_before_and_after(browser, pages):
    entries = load(browser, pages / "tune.html")
    check_common(browser, entries)
    info = check_summary_table(browser, rows_expected=5)
    assert info["heads"][3:5] == ["device memory before", "after"]
    # Every case as written; the tuned ones again after (the expected failure is not tuned).
    chart = check_chart(browser, CASES)
    assert sum(t.startswith("before ") for t in chart["texts"]) == 5
    assert sum(t.startswith("after ") for t in chart["texts"]) == 4
    assert js(browser, "return document.querySelectorAll('table.pairs').length") == 4
    text = js(browser, "return document.body.innerText")
    assert "diagnostics:" not in text
    screenshot(browser, "tune")
