"""report.html in a real browser: headless Debian Chromium driven by Selenium and chromedriver.

Checks that the page loads with no JavaScript error, that the Pareto figure holds the expected
number of points (read from the plotly graph div in the page), and that a screenshot of it is
not blank. Skips with the reason when Chromium, chromedriver or selenium is missing, except
under CI (CI=true) or after `.ci/browser.sh` (DSE_REQUIRE_BROWSER=1), where it fails instead.
DSE_CHROMIUM / DSE_CHROMEDRIVER name the binaries (default: found on PATH).
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sweep_results import no_feasible_sweep, run_sweep

from dse.report import load_results, write_report
from dse.sweep.fronts import config_ids

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# The flags a sandboxed, offline machine needs (no GPU, no background network, root user).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # Parallel coordinates draw with WebGL: opt in to the software renderer explicitly, since
    # Chromium has deprecated falling back to it silently.
    "--enable-unsafe-swiftshader",
    "--window-size=1280,1000",
)
# Collects uncaught errors and console.error calls from the first line of the page on.
ERROR_COLLECTOR = """
window.__errors = [];
window.addEventListener('error', e => window.__errors.push('error: ' + e.message));
window.addEventListener('unhandledrejection', e => window.__errors.push('rejection: ' + e.reason));
const __consoleError = console.error;
console.error = function (...args) { window.__errors.push('console: ' + args.join(' '));
                                      __consoleError.apply(console, args); };
"""
FRONT_RGB = (0xD6, 0x27, 0x28)  # dse.report._render.FRONT


def _chromium() -> str | None:
    return (
        os.environ.get("DSE_CHROMIUM")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
    )


def _chromedriver() -> str | None:
    return os.environ.get("DSE_CHROMEDRIVER") or shutil.which("chromedriver")


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    if not _chromium():
        return "Chromium is not installed (apt-get install chromium; see .ci/browser.sh)"
    if not _chromedriver():
        return "chromedriver is not installed (apt-get install chromium-driver)"
    return None


@pytest.fixture(scope="module")
def driver() -> Iterator[object]:
    why = _missing()
    if why:
        # Under CI, or where .ci/browser.sh provisioned the machine, a skip would hide that the
        # report was never opened in a browser.
        if os.environ.get("CI") == "true" or os.environ.get("DSE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"the browser test must run here but cannot: {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = _chromium()
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="dse-chromium-")
    opts.add_argument(f"--user-data-dir={profile}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit chromedriver path: Selenium Manager would otherwise try to download one.
    d = webdriver.Chrome(service=Service(_chromedriver()), options=opts)
    d.set_page_load_timeout(60)
    d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": ERROR_COLLECTOR})
    try:
        yield d
    finally:
        d.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _open(driver, page: Path) -> None:
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(page.resolve().as_uri())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done = driver.execute_script(
            "const g = [...document.querySelectorAll('.plotly-graph-div')];"
            "return g.length > 0 && g.every(d => d._fullLayout !== undefined);"
        )
        if done:
            return
        time.sleep(0.2)
    pytest.fail(f"{page}: the plotly figures did not render within 30 s")


def _errors(driver) -> list[str]:
    errs = list(driver.execute_script("return window.__errors"))
    errs += [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    return errs


def _trace_sizes(driver, div: str) -> dict[str, int]:
    """Points per trace, by its `meta` tag, as plotly holds them in the graph div."""
    pairs = driver.execute_script(
        "return document.getElementById(arguments[0])._fullData"
        ".map(t => [String(t.meta), t.x ? t.x.length : 0]);",
        div,
    )
    return {meta: n for meta, n in pairs}


# Decodes a PNG (base64) in the page itself and summarises its pixels: size, the fraction that
# is not near-white, the number of distinct colours, and how many are the front's red.
PIXEL_STATS = """
const [b64, front, done] = arguments;
const img = new Image();
img.onload = () => {
  const c = document.createElement('canvas');
  c.width = img.width; c.height = img.height;
  const ctx = c.getContext('2d');
  ctx.drawImage(img, 0, 0);
  const px = ctx.getImageData(0, 0, c.width, c.height).data;
  let ink = 0, red = 0;
  const colours = new Set();
  for (let i = 0; i < px.length; i += 4) {
    const [r, g, b] = [px[i], px[i + 1], px[i + 2]];
    if (r < 245 || g < 245 || b < 245) ink++;
    if (Math.abs(r - front[0]) + Math.abs(g - front[1]) + Math.abs(b - front[2]) <= 6) red++;
    colours.add((r << 16) | (g << 8) | b);
  }
  const n = px.length / 4;
  done({width: c.width, height: c.height, ink: ink / n, colours: colours.size, red: red});
};
img.onerror = () => done({error: 'the screenshot is not a decodable PNG'});
img.src = 'data:image/png;base64,' + b64;
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = run_sweep(
        "tests/data/spaces/gpu_batch.yaml",
        tmp_path_factory.mktemp("gpu_batch"),
        *("--sampler", "random", "--trials", "200", "--seed", "1"),
    )
    return write_report(d)


def test_report_loads_without_errors_and_shows_every_point(driver, report: Path) -> None:
    _open(driver, report)
    assert _errors(driver) == []
    # Nothing was fetched from the network: the page is self-contained.
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert [u for u in urls if not u.startswith(("file:", "data:", "blob:"))] == []
    res = load_results(report.parent)
    t = res.trials
    finite = np.isfinite(t[[o.column for o in res.objectives]].to_numpy(float)).all(axis=1)
    sizes = _trace_sizes(driver, "pareto")
    # One point per distinct configuration (a repeated configuration would be drawn on top of
    # its first trial): `on_front` marks the first trial of each front configuration.
    ids = config_ids(t)
    first = ~pd.Series(ids).duplicated().to_numpy()
    on_front = set(ids[t["on_front"].to_numpy(bool)])
    feasible = t["feasible"].to_numpy(bool)
    assert sizes["points:front"] == len(on_front) == int(t["on_front"].sum())
    assert sizes["points:dominated"] == len(set(ids[feasible]) - on_front)
    assert sizes["points:infeasible"] == int((~feasible & finite & first).sum())
    drawn = driver.execute_script(
        "return document.querySelectorAll('#pareto .scatterlayer .trace path.point').length"
    )
    assert drawn >= int(finite.sum())  # every plotted trial became an SVG marker
    # Every figure of the page rendered.
    ids = driver.execute_script(
        "return [...document.querySelectorAll('.plotly-graph-div')].map(g => g.id)"
    )
    assert {"pareto", "parallel-0", "parallel-1", "importance", "hypervolume"} <= set(ids)


def test_screenshot_is_not_blank(driver, report: Path) -> None:
    from selenium.webdriver.common.by import By

    _open(driver, report)
    el = driver.find_element(By.ID, "pareto")
    driver.execute_script("arguments[0].scrollIntoView()", el)
    png = el.screenshot_as_png
    keep = os.environ.get("DSE_SCREENSHOT")  # a path to look at the picture by hand
    if keep:
        Path(keep).write_bytes(png)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    stats = driver.execute_async_script(
        PIXEL_STATS, base64.b64encode(png).decode(), list(FRONT_RGB)
    )
    assert "error" not in stats, stats
    assert stats["width"] > 600 and stats["height"] > 300, stats
    assert 0.01 < stats["ink"] < 0.6, stats  # drawn on, but not a solid block
    assert stats["colours"] > 50, stats
    # The front's markers are drawn in their colour (exact pixels inside the 9 px markers).
    assert stats["red"] > 20, stats


def test_no_feasible_report_loads(driver, tmp_path: Path) -> None:
    d = no_feasible_sweep(tmp_path)
    _open(driver, write_report(d))
    assert _errors(driver) == []
    sizes = _trace_sizes(driver, "pareto")
    assert sizes["points:front"] == 0 and sizes["points:infeasible"] == 30
    assert "No feasible trial" in driver.find_element("tag name", "body").text


@pytest.fixture(scope="module")
def main_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's main job (issue 32): loss, TPOT and energy, swept exactly."""
    d = run_sweep("search_spaces/gpu_batch.yaml", tmp_path_factory.mktemp("main"), "--no-report")
    return write_report(d)


def _axes(driver, div: str) -> dict:
    return driver.execute_script(
        "const l = document.getElementById(arguments[0])._fullLayout;"
        "return {x: [l.xaxis.type, l.xaxis.range], y: [l.yaxis.type, l.yaxis.range],"
        " notes: (l.annotations || []).map(a => [a.text, a.xref, a.x, a.yref, a.y])};",
        div,
    )


def _click(driver, div: str, label: str) -> None:
    from selenium.webdriver.common.by import By

    g = driver.find_element(By.ID, div)
    driver.execute_script("arguments[0].scrollIntoView()", g)
    (button,) = [
        b for b in g.find_elements(By.CSS_SELECTOR, ".updatemenu-button") if b.text == label
    ]
    button.click()
    time.sleep(0.5)


def test_pairs_keep_the_study_range_in_both_scales(driver, main_job: Path) -> None:
    """Energy against TPOT first, then the other pairs; in the loss figure Llama-3.2-1B is an
    arrow on the right edge, and switching to log and back keeps the study's loss range (a
    far catalogue model never stretches it) with the arrow at the model's TPOT."""
    _open(driver, main_job)
    assert _errors(driver) == []
    ids = driver.execute_script(
        "return [...document.querySelectorAll('.plotly-graph-div')].map(g => g.id)"
    )
    assert ids[:3] == ["pareto", "pareto-1", "pareto-2"] and "hypervolume" not in ids
    start = _axes(driver, "pareto-1")
    assert start["x"][0] == "linear"
    (arrow,) = [n for n in start["notes"] if n[0].startswith("Llama-3.2-1B")]
    assert arrow[1:3] == ["paper", 1]
    lo, hi = start["x"][1]
    assert 2.0 < lo < 2.05 and 2.09 < hi < 2.1  # the study's 2.05-2.09 nats, not the 1B's 2.24
    _click(driver, "pareto-1", "log")
    log = _axes(driver, "pareto-1")
    assert log["x"][0] == "log" and log["x"][1] == pytest.approx(np.log10([lo, hi]))
    (moved,) = [n for n in log["notes"] if n[0].startswith("Llama-3.2-1B")]
    assert moved[4] == pytest.approx(np.log10(arrow[4]))  # plotly converted its TPOT
    _click(driver, "pareto-1", "linear")
    back = _axes(driver, "pareto-1")
    assert back["x"][1] == pytest.approx([lo, hi])
    (again,) = [n for n in back["notes"] if n[0].startswith("Llama-3.2-1B")]
    assert again[4] == pytest.approx(arrow[4])  # back at the model's TPOT (round-off apart)
    assert _errors(driver) == []
