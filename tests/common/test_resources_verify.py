"""``spec.workflow.verify`` on a WorkflowRun: minisign public keys, checked on apply."""

import pytest

from plnt_common.errors import SpecInvalid
from plnt_common.resources import parse_resource
from plnt_common.signatures import generate


def run(verify: object) -> dict[str, object]:
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "WorkflowRun",
        "metadata": {"name": "signed"},
        "spec": {
            "workflow": {"ref": "signed@1.0.0", "registry": "s3://specs", "verify": verify},
            "backend": {"cluster": "gpu-cluster-01"},
        },
    }


def test_public_keys_from_keygen_are_accepted() -> None:
    keys = [generate().public().encoded() for _ in range(2)]
    parsed = parse_resource(run({"publicKeys": keys}))
    assert parsed.spec.workflow.verify is not None  # type: ignore[union-attr]
    assert list(parsed.spec.workflow.verify.public_keys) == keys  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "verify",
    [
        pytest.param({"publicKeys": []}, id="no-keys"),
        pytest.param({"publicKeys": ["RWnotakey"]}, id="not-a-key"),
        pytest.param({"publicKeys": [generate().public().encoded()] * 9}, id="too-many"),
        pytest.param({"keys": ["x"]}, id="misspelt"),
    ],
)
def test_a_bad_verify_is_refused_naming_the_field(verify: object) -> None:
    with pytest.raises(SpecInvalid, match="verify"):
        parse_resource(run(verify))
