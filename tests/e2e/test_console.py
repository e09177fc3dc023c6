"""The operators' console (CONTRACT §10) in a real headless Chromium against a real cluster.

What a person does: sign in with a token, see the agents, watch a session created from the CLI
go PENDING → RUNNING without reloading, drain and undrain an agent with the page's buttons, open a
session's page; and a user's token sees only its own sessions and no operator buttons. Screenshots
of each view land in build/screenshots/ (SOKOVAN_SCREENSHOTS).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver

from tests.e2e.browser import Page, start_browser
from tests.e2e.cluster import Cluster

SOKOVAN = str(Path(sys.executable).parent / "sokovan")
AGENTS = ("e2e-agent-1", "e2e-agent-2")

# Records every data-status a session row takes while the page lives (no reload may reset it).
RECORD_STATUSES = """
window.__seen = [];
window.__sameDocument = true;
new MutationObserver((records) => {
  for (const r of records) {
    const nodes = r.type === "attributes" ? [r.target] : [...r.addedNodes];
    for (const n of nodes) {
      if (n.nodeType !== 1) continue;
      for (const el of [n, ...n.querySelectorAll("[data-session-id]")]) {
        if (el.matches("tr[data-session-id]")) window.__seen.push([el.dataset.sessionId, el.dataset.status]);
      }
    }
  }
}).observe(document.body, {
  subtree: true, childList: true, attributes: true, attributeFilter: ["data-status"],
});
"""


def rest(cluster: Cluster, token: str, method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{cluster.api}{path}", data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read() or b"null")


def cli_create(cluster: Cluster, token: str, *args: str) -> dict[str, Any]:
    env = {**cluster.env, "SOKOVAN_API": cluster.api, "SOKOVAN_TOKEN": token}
    done = subprocess.run(
        [SOKOVAN, "session", "create", "--json", *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def driver() -> Iterator[webdriver.Chrome]:
    browser = start_browser()
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture
def page(driver: webdriver.Chrome, cluster: Cluster) -> Iterator[Page]:
    page = Page(driver, cluster.api)
    page.open()
    yield page
    driver.execute_script("sessionStorage.clear()")


def test_a_bad_token_is_refused_and_a_good_one_shows_the_agents(page: Page, cluster: Cluster) -> None:
    page.sign_in("not-a-token", accepted=False)
    # A refused token leaves the form up with an error, and keeps nothing in sessionStorage.
    page.wait_for(lambda: page.visible("#signin-error"), "the sign-in error")
    assert "not valid" in page.one("#signin-error").text
    assert page.driver.execute_script("return sessionStorage.length") == 0

    page.sign_in(cluster.token)
    for agent in AGENTS:
        page.wait_for(lambda a=agent: page.status_of(f'[data-agent-id="{a}"]') == "READY", f"{agent} READY")
    assert "admin" in page.one("#whoami").text
    page.wait_for(lambda: page.one("#stream-state").get_attribute("data-state") == "live", "the live stream")
    # Admins get the operator buttons; the token is in sessionStorage, never in the URL.
    assert [b.text for b in page.all(f'[data-agent-id="{AGENTS[0]}"] button')] == ["Drain"]
    assert cluster.token not in page.driver.current_url
    # An idle page makes no requests but its one stream (no polling loop).
    count = "return performance.getEntriesByType('resource').length"
    before = page.driver.execute_script(count)
    time.sleep(2)
    assert page.driver.execute_script(count) == before
    page.screenshot("agents")


def test_a_session_from_the_cli_goes_pending_to_running_live_and_drain_works_from_the_page(
    page: Page, cluster: Cluster
) -> None:
    page.sign_in(cluster.token)
    for agent in AGENTS:  # drain both from the page: a new session must wait
        button = page.wait_for(
            lambda a=agent: page.visible(f'[data-agent-id="{a}"] button'), f"{agent}'s Drain"
        )
        assert button.text == "Drain"
        button.click()
        page.wait_for(
            lambda a=agent: page.status_of(f'[data-agent-id="{a}"]') in {"DRAINING", "DRAINED"},
            f"{agent} drained",
        )
    assert rest(cluster, cluster.token, "GET", f"/v2/agents/{AGENTS[0]}")["status"] in {"DRAINING", "DRAINED"}
    page.wait_for(lambda: page.visible(f'[data-agent-id="{AGENTS[0]}"] button').text == "Undrain", "Undrain")
    page.screenshot("agents-drained")

    page.go("#/sessions")
    page.driver.execute_script(RECORD_STATUSES)
    session = cli_create(
        cluster, cluster.token, "--image", "python:3", "--command", "sleep 60", "--resources", "cpu=1,mem=64m"
    )
    row = f'tr[data-session-id="{session["id"]}"]'
    page.wait_for(lambda: page.status_of(row) == "PENDING", "the new session PENDING on the page")
    page.wait_for(  # the reason of its first placement cycle, pushed by a session.pending_reason event
        lambda: page.one(f"{row} .why").text not in {"", "waiting for the next placement cycle"},
        "its pending reason",
    )
    page.screenshot("sessions-pending")

    page.go("#/agents")  # undrain from the page; the session is placed and runs
    for agent in AGENTS:
        button = page.wait_for(
            lambda a=agent: page.visible(f'[data-agent-id="{a}"] button'), f"{agent}'s Undrain"
        )
        assert button.text == "Undrain"
        button.click()
        page.wait_for(
            lambda a=agent: page.status_of(f'[data-agent-id="{a}"]') == "READY", f"{agent} READY again"
        )
    page.go("#/sessions")
    page.wait_for(lambda: page.status_of(row) == "RUNNING", "the session RUNNING on the page")
    seen = [
        status for sid, status in page.driver.execute_script("return window.__seen") if sid == session["id"]
    ]
    assert seen[0] == "PENDING" and seen[-1] == "RUNNING", seen
    assert page.driver.execute_script("return window.__sameDocument") is True  # never reloaded
    page.screenshot("sessions-running")
    page.go("#/agents")  # its kernel shows in its agent's occupancy, live
    metas = lambda: " ".join(e.text for e in page.all("[data-agent-id] .meta"))  # noqa: E731
    page.wait_for(lambda: "1 kernel" in metas(), "the kernel in its agent's occupancy")
    page.screenshot("agents-busy")

    page.go(f"#/sessions/{session['id']}")
    page.wait_for(lambda: page.all("#kernels tr[data-kernel-id]"), "the session's kernels")
    page.wait_for(lambda: len(page.all("#history li")) >= 3, "the session's history timeline")
    timeline = page.one("#history").text
    assert "PENDING → SCHEDULED" in timeline or "→ SCHEDULED" in timeline, timeline
    page.screenshot("session")
    rest(cluster, cluster.token, "DELETE", f"/v2/sessions/{session['id']}")
    page.wait_for(
        lambda: page.status_of(".session-head") in {"TERMINATING", "TERMINATED"},
        "the session ending on its page",
    )


def test_a_user_sees_only_its_own_sessions_and_no_operator_buttons(page: Page, cluster: Cluster) -> None:
    keys = rest(
        cluster, cluster.token, "POST", "/v2/keypairs", {"user": "carol", "project": "team-c", "role": "user"}
    )
    admins = cli_create(
        cluster, cluster.token, "--image", "shell", "--type", "interactive", "--resources", "cpu=1,mem=64m"
    )
    mine = cli_create(
        cluster, keys["token"], "--image", "shell", "--type", "interactive", "--resources", "cpu=1,mem=64m"
    )

    page.sign_in(keys["token"])
    assert "carol" in page.one("#whoami").text
    page.wait_for(lambda: page.status_of(f'[data-agent-id="{AGENTS[0]}"]') == "READY", "the agents")
    assert page.all("[data-agent-id] button") == []  # no Drain/Undrain for a user
    page.go("#/sessions")
    page.wait_for(lambda: page.all(f'tr[data-session-id="{mine["id"]}"]'), "carol's session")
    # A session created after the page opened: carol's appears live, the admin's never does.
    later = cli_create(
        cluster, keys["token"], "--image", "shell", "--type", "interactive", "--resources", "cpu=1,mem=64m"
    )
    others = cli_create(
        cluster, cluster.token, "--image", "shell", "--type", "interactive", "--resources", "cpu=1,mem=64m"
    )
    page.wait_for(lambda: page.all(f'tr[data-session-id="{later["id"]}"]'), "carol's new session, live")
    shown = {el.get_attribute("data-session-id") for el in page.all("tr[data-session-id]")}
    assert shown == {mine["id"], later["id"]}, shown
    assert admins["id"] not in shown and others["id"] not in shown
    page.screenshot("sessions-as-user")

    page.go(f"#/sessions/{admins['id']}")  # the admin's session's page: not found for carol
    page.wait_for(lambda: page.visible("#view .error"), "not found")
    page.sign_out()
    for sid in (admins["id"], mine["id"], later["id"], others["id"]):
        rest(cluster, cluster.token, "DELETE", f"/v2/sessions/{sid}")
