"""The console's deployment pages in headless Chromium: a deployment's replicas become healthy on
the page as the proxy probes them, and an admin scales it with the page's Scale button."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium import webdriver

from tests.e2e.browser import Page, start_browser
from tests.e2e.cluster import Cluster
from tests.e2e.test_console import rest
from tests.e2e.test_deployments import COMMAND, HEALTH, SERVER, serving

__all__ = ["serving"]  # the module's cluster: a manager, two agents and the proxy


@pytest.fixture(scope="module")
def page(serving: Cluster) -> Iterator[Page]:
    driver: webdriver.Chrome = start_browser()
    try:
        page = Page(driver, serving.api)
        page.open()
        page.sign_in(serving.token)
        yield page
    finally:
        driver.quit()


def test_routes_turn_healthy_live_and_scale_from_the_page(page: Page, serving: Cluster) -> None:
    body = {
        "name": "console-echo",
        "type": "custom",
        "replicas": 1,
        "image": "python:3",
        "command": COMMAND,
        "environ": {"SERVER": SERVER},
        "resources": {"cpu": 0.5, "mem": "64m"},
        "health_check": HEALTH,
        "open_to_public": True,
    }
    page.go("#/deployments")
    did = rest(serving, serving.token, "POST", "/v2/deployments", body)["id"]
    row = f'tr[data-deployment-id="{did}"]'
    page.wait_for(lambda: page.all(row), "the new deployment, live")
    page.wait_for(lambda: page.status_of(row) == "READY", "the deployment READY", within=60)
    page.wait_for(lambda: page.one(f"{row} .replicas-text").text == "1 / 1", "1 of 1 replicas healthy, live")
    page.screenshot("deployments")

    page.go(f"#/deployments/{did}")

    def statuses() -> list[str | None]:
        return [r.get_attribute("data-status") for r in page.all("#routes tr[data-route-id]")]

    page.wait_for(lambda: statuses() == ["HEALTHY"], "1 HEALTHY route")
    field = page.wait_for(lambda: page.visible(".deployment-head input.replicas"), "the replicas field")
    field.clear()
    field.send_keys("2")
    page.one(".deployment-head button").click()
    page.wait_for(
        lambda: statuses().count("HEALTHY") == 2,
        "2 HEALTHY routes after Scale",
        within=60,
    )
    assert rest(serving, serving.token, "GET", f"/v2/deployments/{did}")["replicas"] == 2
    page.screenshot("deployment")
    rest(serving, serving.token, "DELETE", f"/v2/deployments/{did}")
    ending = {"DESTROYING", "DESTROYED"}
    page.wait_for(lambda: page.status_of(".deployment-head") in ending, "the deployment destroying, live")
