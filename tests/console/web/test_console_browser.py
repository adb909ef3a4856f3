"""The console's pages in a real headless Chromium (Debian's) against a running stack:
a run reaching Ready live, its timeline, the playground, rollback, and the confirmations."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from rollback_support import NEXT, STABLE, second_version
from stack_support import EXAMPLES, Client
from test_e2e_canary_steps import ready_stable

from plnt_cli.supervisor import Supervisor
from plnt_common.nats_server import free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
playwright_api = pytest.importorskip(
    "playwright.async_api", reason="playwright is not installed (the dev extra)"
)
pytestmark = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None, reason="Debian's chromium is not installed (/usr/bin/chromium)"
)
LIVE_S = 60_000  # ms: a rollout on two busy cores
expect = playwright_api.expect


@pytest.fixture(scope="module")
def console_url(stack: Supervisor, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``plnt serve console`` on the stack's bus, as ``plnt up`` starts it."""
    port = free_port()
    log = tmp_path_factory.mktemp("console") / "console.log"
    env = {
        **os.environ,
        "PLNT_NATS_URL": stack.config.nats_url,
        "PLNT_CONSOLE_PORT": str(port),
    }
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "plnt_cli", "serve", "console"], env=env, stdout=out, stderr=out
        )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            if process.poll() is not None:
                raise AssertionError(f"the console exited: {log.read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=1):
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise AssertionError(f"the console never answered: {log.read_text()}")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
async def page(console_url: str) -> AsyncIterator[object]:
    async with playwright_api.async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            opened = await browser.new_page(viewport={"width": 1366, "height": 768})
            await opened.goto(console_url)
            await expect(opened.locator("#live")).to_have_text("live")
            yield opened
        finally:
            await browser.close()


async def shot(page: object, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    print(f"screenshot: {path}")


async def test_a_run_goes_live_to_ready_and_opens_its_timeline_and_playground(
    page: object, client: Client, registry: Path, tmp_path: Path
) -> None:
    p = page  # playwright's Page
    name = "console-live"
    await ready_stable(client, registry, name)
    row = p.locator(f'tr[data-run="default.{name}"]')  # type: ignore[attr-defined]
    # the page was open before the run existed and was never reloaded
    await expect(row.locator("td.phase")).to_have_text("Ready", timeout=LIVE_S)
    await expect(row.locator("td.revision")).to_have_text(STABLE)
    await shot(p, tmp_path, "runs")

    await row.get_by_role("button", name=f"Open {name}").click()
    steps = p.locator("#timeline .gantt .step")  # type: ignore[attr-defined]
    await expect(steps.first).to_be_visible()
    names = await steps.all_inner_texts()
    assert "spec.pulled" in names and "run.ready" in names, names
    assert len(names) == len(set(names)), "one row per step"
    await shot(p, tmp_path, "timeline")

    # the form comes from the pulled workflow's input schema; typing fills the body
    body = json.loads((EXAMPLES / "invoke.json").read_text())
    for field in ("review", "brand_voice"):
        await p.get_by_label(field, exact=True).fill(body[field])  # type: ignore[attr-defined]
    typed = await p.get_by_label("Invoke body (JSON)").input_value()  # type: ignore[attr-defined]
    assert json.loads(typed) == body
    await p.get_by_role("button", name="Invoke").click()  # type: ignore[attr-defined]
    meta = p.locator("#invoke-meta")  # type: ignore[attr-defined]
    await expect(meta).to_contain_text(f"HTTP 200, revision {STABLE}", timeout=LIVE_S)
    assert (await p.locator("#invoke-answer").inner_text()).strip()  # type: ignore[attr-defined]
    steps_drawn = ("classify_intent", "retrieve_brand_voice", "draft_reply", "safety_check")
    await expect_step_results(p, steps_drawn)
    await shot(p, tmp_path, "playground")

    # a streamed answer's step events land on the same nodes
    await p.get_by_label("Stream the answer (server-sent events)").check()  # type: ignore[attr-defined]
    await p.get_by_role("button", name="Invoke").click()  # type: ignore[attr-defined]
    await expect(meta).to_contain_text("HTTP 200", timeout=LIVE_S)
    assert "event: step" in await p.locator("#invoke-answer").inner_text()  # type: ignore[attr-defined]
    await expect_step_results(p, steps_drawn)


async def expect_step_results(page: object, steps: tuple[str, ...]) -> None:
    """Each step's node on the DAG shows its duration and its (collapsed) output."""
    nodes = page.locator("#dag .node")  # type: ignore[attr-defined]
    await expect(nodes).to_have_count(len(steps))
    for step in steps:
        node = page.locator(f'#dag [data-step="{step}"]')  # type: ignore[attr-defined]
        await expect(node.locator(".timing")).to_have_text(re.compile(r"^\d+\.\d ms"))
        output = node.locator(".output details")
        await expect(output).not_to_have_attribute("open", "")
        assert (await output.locator("pre").text_content() or "").strip(), step


async def test_each_button_asks_first_and_rollback_moves_the_serving_revision_back(
    page: object, client: Client, registry: Path, tmp_path: Path
) -> None:
    p = page
    name = "console-rollback"
    document = await ready_stable(client, registry, name)
    await client.apply(second_version(document, rollback={"keepPreviousFor": "120s"}))
    await client.wait_phase(name, "Ready", generation=2)
    row = p.locator(f'tr[data-run="default.{name}"]')  # type: ignore[attr-defined]
    await expect(row.locator("td.revision")).to_have_text(NEXT, timeout=LIVE_S)
    await row.get_by_role("button", name=f"Open {name}").click()

    dialog = p.locator("#confirm")  # type: ignore[attr-defined]
    result = p.locator("#op-result")  # type: ignore[attr-defined]
    for operation in ("Promote", "Abort", "Rollback"):
        await p.get_by_role("button", name=operation, exact=True).click()  # type: ignore[attr-defined]
        await expect(dialog).to_be_visible()
        await expect(dialog).to_contain_text(f"{operation.lower()} workflowrun default/{name}?")
        await dialog.get_by_role("button", name="Cancel").click()
        await expect(dialog).to_be_hidden()
        await expect(result).to_have_text("")
    await expect(row.locator("td.revision")).to_have_text(NEXT)

    await p.get_by_role("button", name="Promote", exact=True).click()  # type: ignore[attr-defined]
    await dialog.get_by_role("button", name="Confirm").click()
    await expect(result).to_contain_text("has nothing to promote: phase Ready", timeout=LIVE_S)

    await p.get_by_role("button", name="Rollback", exact=True).click()  # type: ignore[attr-defined]
    await shot(p, tmp_path, "confirm")
    await dialog.get_by_role("button", name="Confirm").click()
    await expect(result).to_have_text(
        f"workflowrun/{name} rolled back: phase Reverted", timeout=LIVE_S
    )
    await expect(row.locator("td.revision")).to_have_text(STABLE, timeout=LIVE_S)
    assert (await client.status(name))["revision"] == STABLE
    await shot(p, tmp_path, "rolled-back")
