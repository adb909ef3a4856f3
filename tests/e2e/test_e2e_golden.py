"""Golden cases end to end: real nats-server, every service a real process (the smoke service
with the real sentence-embedding model), the offline runner answering each case."""

import copy
from pathlib import Path
from typing import Any

import yaml
from stack_support import Client, invoke, publish_spec, run_document, workflow_named
from test_e2e_cli import one_line_error, plnt

from plnt_cli.supervisor import Supervisor

REVIEW = {"review": "Great service but slow parking", "brand_voice": "warm, concise"}
PASSING = [
    {
        "name": "mentions-parking",
        "input": REVIEW,
        "expect": {"contains": ["parking"], "notContains": ["refund"], "matches": "(?i)thank"},
    },
    {
        "name": "sounds-like-the-reference",
        "input": REVIEW,
        "expect": {
            "similarTo": "Thank you for the kind words about our service; "
            "we are sorry the parking was slow.",
            "minSimilarity": 0.6,
        },
    },
]
FAILING = [
    PASSING[0],
    {"name": "offers-a-refund", "input": REVIEW, "expect": {"contains": ["refund"]}},
    {
        "name": "talks-about-taxes",
        "input": REVIEW,
        "expect": {"similarTo": "Your quarterly tax return is due at the end of April."},
    },
]


def with_golden(document: dict[str, Any], golden: list[dict[str, Any]]) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    changed["spec"]["smokeTest"]["golden"] = golden
    return changed


async def test_passing_golden_cases_promote_and_a_failing_one_rolls_back_naming_the_cases(
    client: Client, registry: Path
) -> None:
    publish_spec(registry, workflow_named("golden"))
    document = run_document("golden", registry=registry)
    await client.apply(with_golden(document, PASSING))
    ready = await client.wait_phase("golden", "Ready", timeout_s=120)
    smoke = ready["status"]["smoke"]
    assert smoke["passed"] is True
    assert smoke["reason"].endswith("golden cases 2/2 passed")
    results = {result["name"]: result for result in smoke["golden"]}
    assert set(results) == {"mentions-parking", "sounds-like-the-reference"}
    assert all(result["passed"] for result in results.values())
    assert results["sounds-like-the-reference"]["similarity"] >= 0.6

    await client.apply(with_golden(document, FAILING))
    body = await client.wait_phase("golden", "RolledBack", generation=2, timeout_s=120)
    status = body["status"]
    message = status["message"]
    assert message.startswith("rolled back 1.0.0-g2: 2 golden cases failed: ")
    assert 'offers-a-refund (contains "refund" missing)' in message
    assert "talks-about-taxes (similarity " in message and " < 0.70)" in message
    assert "mentions-parking" not in message
    assert message.endswith("1.0.0-g1 keeps serving")
    assert [r["passed"] for r in status["smoke"]["golden"]] == [True, False, False]
    code, revision, answer = await invoke(status["endpoint"], REVIEW)
    assert (code, revision) == (200, "1.0.0-g1")
    assert "parking" in answer["output"]["reply"]


def golden_manifest(tmp_path: Path, registry: Path, golden: Any) -> Path:
    manifest = tmp_path / "run.yaml"
    document = with_golden(run_document("golden-cli", registry=registry), golden)
    manifest.write_text(yaml.safe_dump(document))
    return manifest


def test_plnt_apply_refuses_a_bad_golden_case_in_one_line_naming_the_field(
    stack: Supervisor, tmp_path: Path, registry: Path
) -> None:
    # Every other refusal goes through the same parse_resource (tests/common/test_golden_cases).
    golden = [PASSING[0], {**PASSING[0], "name": "b", "expect": {"matches": "(?i"}}]
    manifest = golden_manifest(tmp_path, registry, golden)
    line = one_line_error(plnt("apply", "-f", str(manifest), nats=stack.config.nats_url))
    assert "spec.smokeTest.golden[1].expect.matches: not a valid regular expression" in line


def test_plnt_apply_takes_the_golden_example(stack: Supervisor, tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "workflowrun-golden.yaml"
    applied = plnt("apply", "-f", str(example), nats=stack.config.nats_url)
    assert applied.returncode == 0, applied.stderr
    assert "workflowrun.plnt.work/review-responder-golden" in applied.stdout
