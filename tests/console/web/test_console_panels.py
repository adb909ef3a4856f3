"""The run page's playground form and status panels in a real headless Chromium (Debian's),
against a console on a real nats-server whose store holds what the saga would have written:
the pulled spec in plnt-specs, the run's projection and its WorkflowRun with a status."""

import copy
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from stack_support import run_document

sys.path.insert(0, str(Path(__file__).parents[1]))

from console_support import Console, running_console
from test_console_api import put_run, wait_for_run
from test_console_browser import CHROMIUM, CHROMIUM_ARGS, playwright_api, shot
from test_console_workflow import WORKFLOW, pulled, store_spec

from plnt_common.resource_store import ResourceStore
from plnt_common.resources import WorkflowRun

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (/usr/bin/chromium)"
)
expect = playwright_api.expect

PLACEMENT = [
    {"backend": "gpu-east", "state": "Placed", "reason": "", "replicas": 2},
    {"backend": "gpu-west", "state": "Skipped", "reason": "NoCapacity", "replicas": 0},
]
SHADOW = {
    "pairs": 57,
    "calls": 200,
    "similarity": 0.812,
    "costRatio": 1.25,
    "passed": False,
    "reason": "judging: 57 of 200 pairs",
    "examples": [
        {"input": '{"ticket": "refund?"}', "stable": "We refund.", "canary": "No.", "score": 0.12},
        {"input": '{"ticket": "hours"}', "stable": "9 to 5.", "canary": "9-17.", "score": 0.55},
    ],
}


@pytest.fixture
async def console(nats_url: str) -> AsyncIterator[Console]:
    async with running_console(nats_url) as running:
        yield running


@pytest.fixture
async def page(console: Console) -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            opened = await browser.new_page(viewport={"width": 1366, "height": 900})
            await opened.goto(console.url)
            await expect(opened.locator("#live")).to_have_text("live")
            yield opened
        finally:
            await browser.close()


async def written_run(console: Console, name: str, status: dict[str, Any]) -> None:
    """The run as the saga leaves it: its spec pulled, its projection and its status."""
    digest = await store_spec(console, WORKFLOW)
    store = ResourceStore(console.bus)
    document = run_document(name, registry=Path("/nowhere"))
    await store.apply(WorkflowRun.model_validate(document))
    await store.update_status(
        "WorkflowRun", "default", name, {"phase": "Ready", "specDigest": digest, **status}
    )
    await put_run(console, pulled(name, digest))
    await wait_for_run(console, name)


async def open_run(page: Any, name: str) -> None:
    row = page.locator(f'tr[data-run="default.{name}"]')
    await row.get_by_role("button", name=f"Open {name}").click()


async def test_the_form_is_built_from_the_workflows_input_and_submits_the_typed_body(
    page: Any, console: Console, tmp_path: Path
) -> None:
    await written_run(console, "formed", {})
    await open_run(page, "formed")
    await expect(page.locator("#workflow-note")).to_have_text("workflow triage@1.0.0")
    ticket = page.get_by_label("Ticket text (required)")
    await expect(ticket).to_have_attribute("type", "text")
    assert await ticket.evaluate("node => node.required")
    await expect(page.get_by_label("budget")).to_have_attribute("type", "number")
    await expect(page.get_by_label("attempts")).to_have_attribute("step", "1")
    await expect(page.get_by_label("urgent")).to_have_attribute("type", "checkbox")
    assert await page.get_by_label("priority").evaluate("node => node.tagName") == "SELECT"
    assert await page.locator("#input-fields [name=tags]").count() == 0  # an array: JSON body

    await page.get_by_label("Invoke body (JSON)").fill('{"tags": ["billing"]}')
    await ticket.fill("My invoice is wrong")
    await page.get_by_label("priority").select_option(label="high")
    await page.get_by_label("budget").fill("2.5")
    await page.get_by_label("attempts").fill("3")
    await page.get_by_label("urgent").check()
    await shot(page, tmp_path, "form")
    async with page.expect_request(lambda r: r.url.endswith("/invoke")) as sent:
        await page.get_by_role("button", name="Invoke").click()
    assert json.loads((await sent.value).post_data) == {
        "tags": ["billing"],
        "ticket": "My invoice is wrong",
        "priority": "high",
        "budget": 2.5,
        "attempts": 3,
        "urgent": True,
    }


async def test_the_dag_draws_each_step_right_of_the_steps_it_needs(
    page: Any, console: Console
) -> None:
    await written_run(console, "drawn", {})
    await open_run(page, "drawn")
    nodes = page.locator("#dag .node")
    await expect(nodes).to_have_count(4)
    columns = {
        step: await page.locator(f'#dag [data-step="{step}"]').evaluate(
            "node => node.style.gridColumn"
        )
        for step in ("classify", "draft", "check", "merge")
    }
    assert columns == {"classify": "1", "draft": "2", "check": "2", "merge": "3"}
    await expect(page.locator('#dag [data-step="merge"] .needs')).to_have_text("needs draft, check")


async def test_placement_and_shadow_panels_show_a_written_status_and_nothing_without_one(
    page: Any, console: Console, tmp_path: Path
) -> None:
    await written_run(console, "plain", {})
    await written_run(console, "placed", {"placement": PLACEMENT, "shadow": SHADOW})
    await open_run(page, "plain")
    await expect(page.locator("#workflow-note")).to_have_text("workflow triage@1.0.0")
    await expect(page.locator("#placement")).to_be_hidden()
    await expect(page.locator("#shadow")).to_be_hidden()

    await open_run(page, "placed")
    placement = page.get_by_role("table", name="placement")
    await expect(placement.locator("tbody tr")).to_have_count(2)
    skipped = placement.locator("tbody tr").nth(1)
    await expect(skipped.locator('[data-col="backend"]')).to_have_text("gpu-west")
    await expect(skipped.locator('[data-col="state"]')).to_have_text("Skipped")
    await expect(skipped.locator('[data-col="reason"]')).to_have_text("NoCapacity")
    await expect(skipped.locator('[data-col="replicas"]')).to_have_text("0")
    shadow = page.locator("#shadow")
    await expect(shadow.locator('[data-figure="similarity"]')).to_have_text("0.812")
    await expect(shadow.locator('[data-figure="reason"]')).to_have_text("judging: 57 of 200 pairs")
    worst = shadow.get_by_role("group", name="pair scored 0.120")
    await expect(worst.locator("pre.stable")).to_have_text("We refund.")
    await expect(worst.locator("pre.canary")).to_have_text("No.")
    await expect(shadow.locator(".pair")).to_have_count(2)
    await shot(page, tmp_path, "placement-shadow")

    await open_run(page, "plain")  # another run's panels do not stay behind
    await expect(page.locator("#placement")).to_be_hidden()
    await expect(page.locator("#shadow")).to_be_hidden()


async def test_a_new_generations_spec_replaces_the_form_and_dag_live(
    page: Any, console: Console
) -> None:
    await written_run(console, "moving", {})
    await open_run(page, "moving")
    await expect(page.locator("#workflow-note")).to_have_text("workflow triage@1.0.0")
    second = copy.deepcopy(WORKFLOW)
    second["metadata"]["version"] = "2.0.0"
    second["spec"]["input"]["properties"] = {"question": {"type": "string"}}
    second["spec"]["input"]["required"] = []
    second["spec"]["steps"] = second["spec"]["steps"][:1]
    digest = await store_spec(console, second)
    await put_run(console, pulled("moving", digest))  # the page is never reloaded
    await expect(page.locator("#workflow-note")).to_have_text("workflow triage@2.0.0")
    await expect(page.locator("#input-fields input")).to_have_count(1)
    await expect(page.get_by_label("question")).to_be_visible()
    await expect(page.locator("#dag .node")).to_have_count(1)
