"""The puller's side of signed specs: ``Registry.fetch_signature`` on both adapters (and
through ``RegistryByScheme``), and ``logic.verify_signature``'s decisions."""

import pytest
from puller_support import VERSION, WORKFLOW, SpecSource
from test_puller_registries import adapter_for

from plnt_common.errors import SignatureInvalid, SignatureMissing
from plnt_common.resources import Verify
from plnt_common.signatures import MAX_SIGNATURE_BYTES, generate, sign
from plnt_puller import logic
from plnt_puller.adapters.registries import RegistryByScheme
from plnt_puller.ports import SIGNATURE_FILE

SPEC = b"apiVersion: microagents.dev/v1\n"


@pytest.fixture
def endpoint(source: SpecSource, request: pytest.FixtureRequest) -> str | None:
    return request.getfixturevalue("s3_endpoint") if source.kind == "s3" else None


async def test_fetch_signature_returns_the_file_beside_the_spec_or_none(
    source: SpecSource, endpoint: str | None
) -> None:
    adapter = adapter_for(source, endpoint)
    registry = RegistryByScheme(adapters={source.kind: adapter})
    source.publish(SPEC)
    for reader in (adapter, registry):
        found = await reader.fetch_signature(registry=source.url, name=WORKFLOW, version=VERSION)
        assert found is None
    source.publish(b"signature bytes", file=SIGNATURE_FILE)
    for reader in (adapter, registry):
        found = await reader.fetch_signature(registry=source.url, name=WORKFLOW, version=VERSION)
        assert found == b"signature bytes"


async def test_an_oversized_signature_file_is_signature_invalid(
    source: SpecSource, endpoint: str | None
) -> None:
    source.publish(SPEC)
    source.publish(b"x" * (MAX_SIGNATURE_BYTES + 1), file=SIGNATURE_FILE)
    with pytest.raises(SignatureInvalid):
        await adapter_for(source, endpoint).fetch_signature(
            registry=source.url, name=WORKFLOW, version=VERSION
        )


def test_verify_signature_decides_missing_invalid_and_valid() -> None:
    key, other = generate(), generate()
    verify = Verify(publicKeys=(other.public().encoded(), key.public().encoded()))
    signature = sign(SPEC, key=key, trusted_comment="c")
    logic.verify_signature(raw=SPEC, signature=signature, verify=verify)
    logic.verify_signature(raw=SPEC, signature=None, verify=None)  # no verify: anything goes
    with pytest.raises(SignatureMissing):
        logic.verify_signature(raw=SPEC, signature=None, verify=verify)
    with pytest.raises(SignatureInvalid):
        logic.verify_signature(raw=SPEC + b"#", signature=signature, verify=verify)
    only_other = Verify(publicKeys=(other.public().encoded(),))
    with pytest.raises(SignatureInvalid):
        logic.verify_signature(raw=SPEC, signature=signature, verify=only_other)


@pytest.mark.parametrize("error", [SignatureMissing("m"), SignatureInvalid("i")], ids=str)
def test_signature_failures_fail_at_once_with_their_reason(error: Exception) -> None:
    failure = logic.failure_for(error, ref=f"{WORKFLOW}@{VERSION}")
    assert failure is not None and failure.reason.value == type(error).__name__
