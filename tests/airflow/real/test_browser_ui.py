"""Airflow's UI in a real browser: headless Chromium (Debian's `chromium` package, driven by
Playwright with `executable_path`, so Playwright downloads no browser of its own) against an
api-server, scheduler and dag-processor started as processes (tests/airflow/real/harness.py).

- The connection form for a new `delta` connection shows our labels and placeholders, and
  hides schema and port (the provider's `ui-field-behaviour`).
- The task log of a committing task (an in-process MERGE, no Spark) shows our commit line.

Every wait polls the DOM or the API with a deadline. The screenshots are saved in the test's
tmp dir; with AIRFLOW_DELTA_UPDATE_SCREENSHOTS=1 (`make screenshots`) also into docs/img/.
Skipped, with the reason, only when no Chromium binary is installed."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.airflow.real.harness import (
    REPO,
    Api,
    airflow_env,
    free_port,
    log_tails,
    running_airflow,
)

CHROMIUM = (
    os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
)

pytestmark = [
    pytest.mark.real_airflow,
    pytest.mark.browser,
    pytest.mark.timeout(360),
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no Chromium binary on PATH: install Debian's package (apt-get install chromium) "
        "to run the UI test (.ci/run does, as root)",
    ),
]

DEADLINE = 240  # seconds for the whole scenario, the servers' start included (~35 s idle)
DOCS_IMG = REPO / "docs" / "img"
CHROMIUM_ARGS = [
    # As root in a container, and on a machine whose network is closed: no sandbox, no GPU,
    # none of Chromium's own background connections.
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def airflow_ui(tmp_path: Path) -> Iterator[dict[str, Any]]:
    home = tmp_path / "home"
    dags = tmp_path / "dags"
    home.mkdir()
    dags.mkdir()
    shutil.copy(Path(__file__).with_name("ui_dags.py"), dags / "ui_dags.py")
    # The table under a short path, so that the log lines in the screenshot are readable.
    lake = tempfile.mkdtemp(prefix="lake-")
    env = airflow_env(home, dags, free_port(), AIRFLOW_DELTA_DEMO_ROOT=lake)
    try:
        with running_airflow(env, tmp_path, ("api-server", "scheduler", "dag-processor")) as up:
            yield up
    finally:
        shutil.rmtree(lake, ignore_errors=True)


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 800})
            yield page
        finally:
            browser.close()


def save_screenshot(element: Any, name: str, tmp_path: Path) -> Path:
    """Screenshot `element` (a page or a locator) into the tmp dir, and into docs/img/ when
    AIRFLOW_DELTA_UPDATE_SCREENSHOTS=1."""
    path = tmp_path / name
    element.screenshot(path=str(path))
    if os.environ.get("AIRFLOW_DELTA_UPDATE_SCREENSHOTS") == "1":
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, DOCS_IMG / name)
    return path


def test_connection_form_and_task_log_in_chromium(
    airflow_ui: dict[str, Any], browser_page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import expect

    started = time.monotonic()
    deadline = started + DEADLINE
    logs: Path = airflow_ui["logs"]
    api = Api(airflow_ui["port"], deadline, logs)
    page = browser_page

    def remaining_ms() -> float:
        return max(1000.0, (deadline - time.monotonic()) * 1000)

    def fail_with_page(step: str, exc: Exception) -> None:
        shot = tmp_path / "failure.png"
        try:
            page.screenshot(path=str(shot), full_page=True)
            text = page.inner_text("body")[-3000:]
        except PlaywrightError as again:
            text = f"(no page text: {again})"
        pytest.fail(
            f"{step}: {exc}\nurl: {page.url}\nscreenshot: {shot}\npage text:\n{text}\n"
            f"{log_tails(logs)}"
        )

    # The run starts now and goes on while the browser looks at the connection form.
    api.wait_for_dags("ui_customers")
    run_id = api.trigger("ui_customers")
    timings: dict[str, float] = {"servers and token": time.monotonic() - started}

    # 1. The connection form of a new `delta` connection.
    step = time.monotonic()
    try:
        page.set_default_timeout(remaining_ms())
        page.goto(f"{api.base}/connections")
        page.get_by_role("button", name="Add Connection").click()
        dialog = page.get_by_role("dialog")
        dialog.locator('input[name="connection_id"]').fill("delta_minio")
        dialog.get_by_role("combobox").fill("Delta Lake")
        page.get_by_role("option", name="Delta Lake", exact=True).click()
        for label in (
            "Endpoint URL (S3-compatible stores, optional)",
            "Access key ID (optional)",
            "Secret access key (optional)",
        ):
            expect(dialog.locator("label", has_text=label)).to_be_visible()
        expect(dialog.locator('input[name="host"]')).to_have_attribute(
            "placeholder", "http://minio:9000"
        )
        expect(dialog.locator('input[name="login"]')).to_have_attribute("placeholder", "AKIA...")
        # Relabeled, so Airflow's own labels are gone; schema and port are hidden.
        for label in ("Host", "Login", "Password", "Schema", "Port"):
            expect(dialog.get_by_text(label, exact=True)).to_have_count(0)
        for name in ("schema", "port"):
            expect(dialog.locator(f'input[name="{name}"]')).to_have_count(0)
        save_screenshot(dialog, "delta-connection-form.png", tmp_path)
    except (AssertionError, PlaywrightError) as exc:
        fail_with_page("the delta connection form", exc)
    timings["connection form"] = time.monotonic() - step

    # 2. The task log of the committing task.
    step = time.monotonic()
    api.wait_for_success("ui_customers", run_id)
    timings["the run (in process, no Spark)"] = time.monotonic() - step
    step = time.monotonic()
    try:
        page.set_default_timeout(remaining_ms())
        page.goto(
            f"{api.base}/dags/ui_customers/runs/{quote(run_id, safe='')}/tasks/merge_customers"
        )
        commit_line = page.get_by_text(
            re.compile(r"Committed version 1 of table \S+/tables/customers \(operation MERGE")
        )
        expect(commit_line.first).to_be_visible()
        expect(page.get_by_text(re.compile(r"run in process")).first).to_be_visible()
        # The log viewer's shortcut `w` wraps long lines: wait (briefly) for the line to grow.
        unwrapped = commit_line.first.bounding_box()
        page.keyboard.press("w")
        wrap_by = time.monotonic() + 5
        while time.monotonic() < wrap_by:
            box = commit_line.first.bounding_box()
            if not unwrapped or not box or box["height"] > unwrapped["height"]:
                break
            page.wait_for_timeout(100)
        save_screenshot(page, "delta-task-log.png", tmp_path)
    except (AssertionError, PlaywrightError) as exc:
        fail_with_page("the merge task's log", exc)
    timings["task log"] = time.monotonic() - step
    print("timings (s):", {k: round(v, 1) for k, v in timings.items()})
