"""The HTML report opens in a real headless Chromium with its charts drawn; its screenshot is the
one docs/scheduling.md shows (docs/img/simulate-report.png)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from sokovan.cli.main import cli
from sokovan.sim.synthetic import synthetic_trace
from sokovan.sim.trace import write_trace
from tests.e2e.browser import start_browser

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "simulate-report.png"


def test_the_report_opens_with_its_charts_visible(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    write_trace(synthetic_trace(800, 40, seed=2, load=1.05, burst=1.8), trace)
    report = tmp_path / "report.html"
    result = CliRunner().invoke(
        cli,
        ["simulate", "--trace", str(trace), "--policy", "fifo,drf", "--queue-policy", "backfill,block",
         "--html", str(report)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = report.read_text()
    assert "http://" not in text and "https://" not in text and "<script" not in text  # self-contained

    driver = start_browser()
    try:
        driver.set_window_size(1440, 1800)
        driver.get(report.as_uri())
        charts = driver.execute_script(
            "return [...document.querySelectorAll('img.chart')].map(i => {"
            " const r = i.getBoundingClientRect();"
            " return {id: i.id, complete: i.complete, natural: i.naturalWidth,"
            " width: r.width, height: r.height}; })"
        )
        assert [c["id"] for c in charts] == ["chart-wait-cdf", "chart-utilization", "chart-user-waits"]
        for chart in charts:
            assert chart["complete"] and chart["natural"] > 300, chart  # decoded, not a broken image
            assert chart["width"] > 300 and chart["height"] > 200, chart  # laid out, visible
        headers = driver.execute_script(
            "return [...document.querySelectorAll('#runs thead th')].map(th => th.textContent)"
        )
        assert headers == ["scheduler", "fifo", "fifo", "drf", "drf"]
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(SCREENSHOT))
    finally:
        driver.quit()
