"""The example workflows of examples/workflows, as a user deploys them, on one real embedded
stack whose backend's LLM is the fake OpenAI-compatible server: ticket-triage (a code tool
with a pip requirement, then ``llm.chat`` with a schema) and invoice-extractor (a spec
alone, a nested output schema). The requirement is installed offline from a stand-in
wheel built here. The committed registry copies must be what ``plnt publish`` makes of the
source folders, so they cannot drift from them.
"""

import copy
import filecmp
import json
import re
import shutil
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from stack_fixtures import start_stack
from stack_support import EXAMPLES, Client, invoke
from test_e2e_code import READY_S, ended
from test_e2e_publish import published

from plnt_cli.supervisor import Supervisor
from plnt_common.bus.bus import Bus
from plnt_common.workflow import spec_digest
from plnt_testkit.code_archives import build_wheel, offline_pip_env
from plnt_testkit.fake_llm import FakeLLM, running_in_thread

SOURCES = EXAMPLES / "workflows"
BACKEND = "examples-llm"
TICKET = {"text": "I was charged twice on my last invoice", "customer": "ACME corp"}
BUG_TICKET = {"text": "The dashboard crashes when I open reports", "customer": "Globex Inc."}

TEXTDISTANCE = '''\
"""A stand-in for textdistance (the API subset the ticket-triage example uses):
levenshtein.normalized_similarity, computed the same way."""


class _Levenshtein:
    def distance(self, a, b):
        row = list(range(len(b) + 1))
        for i, x in enumerate(a, 1):
            previous, row[0] = row[0], i
            for j, y in enumerate(b, 1):
                previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
        return row[len(b)]

    def normalized_similarity(self, a, b):
        longest = max(len(a), len(b))
        return 1.0 if longest == 0 else 1 - self.distance(a, b) / longest


levenshtein = _Levenshtein()
'''


def answer(messages: Sequence[dict[str, Any]]) -> str:
    """The fake LLM's answer, read from the prompt it was sent: a queue for a ticket
    (from the ticket's words), the fields of an invoice (parsed from its text)."""
    user = next((str(m["content"]) for m in messages if m.get("role") == "user"), "")
    if user.startswith("Ticket:"):
        ticket = user.splitlines()[0].lower()
        queue = (
            "billing"
            if re.search(r"charged|invoice|refund", ticket)
            else "bugs"
            if re.search(r"crash|error|broken", ticket)
            else "sales"
        )
        return json.dumps({"queue": queue})
    if user.startswith("Invoice:"):
        return json.dumps(invoice_fields(user))
    return "not a prompt of the example workflows"


def invoice_fields(text: str) -> dict[str, Any]:
    lines = [
        {
            "description": m["what"],
            "quantity": float(m["qty"]),
            "unit_price": float(m["price"]),
            "amount": float(m["amount"]),
        }
        for m in re.finditer(
            r"(?P<qty>\d+) x (?P<what>[^\n]+?) at (?P<price>[\d.]+) = (?P<amount>[\d.]+)", text
        )
    ]

    def number(label: str) -> float:
        match = re.search(rf"{label}[^\d\n]*(?:\d+% )?([\d.]+)", text)
        assert match is not None, f"no {label} in the prompt: {text}"
        return float(match[1])

    number_match = re.search(r"INVOICE (\S+)", text)
    date_match = re.search(r"Date: (\S+)", text)
    supplier = re.search(r"\n([^\n]+), VAT (\S+)", text)
    assert number_match and date_match and supplier, f"not an invoice: {text}"
    return {
        "invoice_number": number_match[1],
        "issue_date": date_match[1],
        "supplier": {"name": supplier[1], "vat_id": supplier[2]},
        "lines": lines,
        "totals": {
            "net": number("Net"),
            "tax": number("VAT 19%"),
            "gross": number("Total EUR"),
            "currency": "EUR",
        },
    }


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeLLM]:
    with running_in_thread(FakeLLM(reply=answer)) as llm:
        yield llm


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    wheels = tmp_path_factory.mktemp("wheels")
    build_wheel(wheels, name="textdistance", version="4.6.3", source=TEXTDISTANCE)
    env = {
        **offline_pip_env(wheels),
        "PLNT_INSTALLER_READY_TIMEOUT_S": str(READY_S),
    }
    supervisor = start_stack(tmp_path_factory.mktemp("examples"), env=env)
    yield supervisor
    supervisor.stop()


@pytest.fixture
async def client(stack: Supervisor, fake_llm: FakeLLM) -> AsyncIterator[Client]:
    bus = await Bus.open(stack.config.nats_url, service="test", wait_for_server=True)
    test_client = Client(bus)
    await test_client.apply(
        {
            "apiVersion": "plnt.work/v1",
            "kind": "PlntBackend",
            "metadata": {"name": BACKEND},
            "spec": {"type": "local", "llm": {"baseUrl": fake_llm.base_url, "model": "fake"}},
        }
    )
    yield test_client
    await bus.close()


def example_run(
    file: str, *, name: str | None = None, registry: Path | None = None, ref: str | None = None
) -> dict[str, Any]:
    """An examples/ WorkflowRun as ``plnt apply`` stores it (its ``file:./registry``
    resolved), on the fake LLM's backend."""
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / file).read_text())
    document = copy.deepcopy(document)
    workflow = document["spec"]["workflow"]
    assert workflow["registry"] == "file:./registry"
    workflow["registry"] = (registry or EXAMPLES / "registry").as_uri()
    if registry is not None or ref is not None:
        workflow.pop("integrityHash")
    if ref is not None:
        workflow["ref"] = ref
    if name is not None:
        document["metadata"]["name"] = name
    document["spec"]["backend"]["cluster"] = BACKEND
    return document


@pytest.mark.parametrize("name", ["ticket-triage", "invoice-extractor"])
def test_the_committed_example_equals_what_plnt_publish_makes_of_its_source_folder(
    name: str, tmp_path: Path
) -> None:
    pins = published(str(SOURCES / name), "--registry", tmp_path.as_uri())
    fresh, committed = tmp_path / name / "1.0.0", EXAMPLES / "registry" / name / "1.0.0"
    files = sorted(p.name for p in committed.iterdir())
    assert sorted(p.name for p in fresh.iterdir()) == files
    _, mismatched, errors = filecmp.cmpfiles(fresh, committed, files, shallow=False)
    assert not mismatched and not errors, f"republish {name} into examples/registry: {mismatched}"
    pinned = spec_digest((committed / "workflow.yaml").read_bytes())
    assert pins["integrityHash"] == pinned
    run: dict[str, Any] = yaml.safe_load((EXAMPLES / f"workflowrun-{name}.yaml").read_text())
    assert run["spec"]["workflow"]["integrityHash"] == pinned
    assert run["spec"]["workflow"]["ref"] == f"{name}@1.0.0"


async def test_ticket_triage_routes_by_the_ticket_with_the_crm_answer_in_the_prompt(
    client: Client, fake_llm: FakeLLM
) -> None:
    await client.apply(example_run("workflowrun-ticket-triage.yaml"))
    ready = await ended(client, "ticket-triage", "Ready")
    endpoint = ready["status"]["endpoint"]
    assert "/workflows/ticket-triage/invoke" in endpoint

    code, revision, body = await invoke(endpoint, TICKET)
    assert (code, revision) == (200, "1.0.0-g1"), body
    assert body["output"]["route"] == {"queue": "billing"}
    assert body["reply"] == "billing"
    assert body["steps"]["customer"]["output"]["account"] == "A-1001"
    prompt = fake_llm.received[-1].user
    assert TICKET["text"] in prompt
    assert "Acme Corporation (account A-1001, plan enterprise, 2 unpaid invoices)" in prompt
    assert "Acme Cloud" in fake_llm.received[-1].system

    code, _, body = await invoke(endpoint, BUG_TICKET)
    assert (code, body["output"]["route"]) == (200, {"queue": "bugs"}), body
    assert "Globex (account A-1002, plan team, 0 unpaid invoices)" in fake_llm.received[-1].user

    before = fake_llm.request_count
    code, _, body = await invoke(endpoint, {"text": "no customer named"})
    assert code == 422 and "customer" in body["error"], body
    assert fake_llm.request_count == before


async def test_a_ticket_triage_revision_whose_crm_tool_raises_rolls_back_and_1_0_0_serves(
    client: Client, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    name = "triage-rollback"
    registry = tmp_path / "registry"
    published(str(SOURCES / "ticket-triage"), "--registry", registry.as_uri())
    broken = tmp_path / "broken"
    shutil.copytree(SOURCES / "ticket-triage", broken)
    spec = (broken / "workflow.yaml").read_text().replace("version: 1.0.0", "version: 1.1.0")
    (broken / "workflow.yaml").write_text(spec)
    tools = broken / "src" / "ticket_triage" / "tools.py"
    tools.write_text(
        tools.read_text()
        + '\n\ndef lookup(step):\n    raise ConnectionError("the CRM is unreachable")\n'
    )
    published(str(broken), "--registry", registry.as_uri())

    await client.apply(example_run("workflowrun-ticket-triage.yaml", name=name, registry=registry))
    ready = await ended(client, name, "Ready")
    await client.apply(
        example_run(
            "workflowrun-ticket-triage.yaml",
            name=name,
            registry=registry,
            ref="ticket-triage@1.1.0",
        )
    )
    body = await ended(client, name, "RolledBack", generation=2)
    assert body["status"]["revision"] == "1.0.0-g1"
    assert "ConnectionError: the CRM is unreachable" in json.dumps(body["status"]), body["status"]

    for _ in range(5):
        code, revision, answered = await invoke(ready["status"]["endpoint"], TICKET)
        assert (code, revision) == (200, "1.0.0-g1"), answered
        assert answered["output"]["route"] == {"queue": "billing"}


async def test_invoice_extractor_answers_its_nested_schema_and_refuses_a_body_without_text(
    client: Client, fake_llm: FakeLLM
) -> None:
    await client.apply(example_run("workflowrun-invoice-extractor.yaml"))
    ready = await ended(client, "invoice-extractor", "Ready")
    endpoint = ready["status"]["endpoint"]
    invoice = json.loads((EXAMPLES / "invoice.json").read_text())

    code, revision, body = await invoke(endpoint, invoice)
    assert (code, revision) == (200, "1.0.0-g1"), body
    assert body["output"]["extract"] == {
        "invoice_number": "INV-2026-0042",
        "issue_date": "2026-11-30",
        "supplier": {"name": "Northwind Supplies GmbH", "vat_id": "DE123456789"},
        "lines": [
            {
                "description": "Paper A4, 500 sheets",
                "quantity": 3.0,
                "unit_price": 4.5,
                "amount": 13.5,
            },
            {"description": "Stapler", "quantity": 1.0, "unit_price": 12.0, "amount": 12.0},
        ],
        "totals": {"net": 25.5, "tax": 4.85, "gross": 30.35, "currency": "EUR"},
    }
    assert body["reply"] == "INV-2026-0042"
    assert invoice["text"] in fake_llm.received[-1].user
    assert "use EUR" in fake_llm.received[-1].system

    before = fake_llm.request_count
    code, _, body = await invoke(endpoint, {"invoice": "INV-1"})
    assert code == 422 and "text" in body["error"], body
    assert fake_llm.request_count == before


def test_the_walkthrough_in_docs_workflows_shows_the_ticket_triage_folder_as_it_is() -> None:
    guide = (EXAMPLES.parent / "docs" / "workflows.md").read_text()
    shown = dict(
        re.findall(
            r"^`(ticket-triage/[^`]+)`[^\n]*\n(?:[^\n]*\n)*?\n```\w+\n(.*?\n)```",
            guide,
            re.M | re.S,
        )
    )
    folder = SOURCES / "ticket-triage"
    files = sorted(
        str(p.relative_to(SOURCES))
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert sorted(shown) == files
    for name, text in shown.items():
        assert text == (SOURCES / name).read_text(), f"docs/workflows.md shows another {name}"
