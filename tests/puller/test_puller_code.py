"""A spec with code (``runtime.code``): the puller fetches the archive beside workflow.yaml
from the same registry, file or S3, checks it against its pinned digest and the archive
rules, and stores it by that digest in plnt-specs next to the spec; code that is missing
or does not match fails the run ``CodeInvalid`` at once, storing nothing."""

from typing import Any

import pytest
from nats.js.errors import ObjectNotFoundError
from puller_support import (
    VERSION,
    WORKFLOW,
    FileSource,
    PullerUnderTest,
    SpecSource,
    run_snapshot,
    workflow_doc,
    workflow_yaml,
)

from plnt_common import subjects
from plnt_common.code_archive import archive_digest
from plnt_common.events import EventType, RunFailed, SpecPulled
from plnt_common.status import Reason
from plnt_common.workflow import spec_digest
from plnt_testkit.code_archives import code_archive

ARCHIVE = "code.tar.gz"


def spec_with_code(digest: str, *, archive: str = ARCHIVE) -> bytes:
    document: dict[str, Any] = workflow_doc()
    document["spec"]["runtime"]["code"] = {
        "archive": archive,
        "digest": digest,
        "requirements": ["rapidfuzz>=3,<4"],
    }
    return workflow_yaml(document)


async def code_failure(puller: PullerUnderTest, source: SpecSource) -> RunFailed:
    request = await puller.request(run_snapshot(registry=source.url))
    outcome = await puller.outcome(request)
    assert outcome.event_type is EventType.RUN_FAILED, outcome.data
    failure = outcome.payload()
    assert isinstance(failure, RunFailed)
    assert failure.reason is Reason.CODE_INVALID, failure
    consumer = await puller.bus.js.consumer_info(subjects.STREAM, subjects.durable_name("puller"))
    assert consumer.delivered.consumer_seq == 1  # failed at once, not retried
    return failure


async def assert_not_stored(puller: PullerUnderTest, *digests: str) -> None:
    for digest in digests:
        with pytest.raises(ObjectNotFoundError):
            await puller.bus.specs.get_info(digest)


async def test_the_archive_is_fetched_beside_the_spec_verified_and_stored_by_its_digest(
    puller: PullerUnderTest, source: SpecSource
) -> None:
    archive = code_archive({"triage/__init__.py": "", "triage/tools.py": "def f(x):\n    pass\n"})
    digest = archive_digest(archive)
    spec = spec_with_code(digest)
    source.publish(spec)
    source.publish(archive, file=ARCHIVE)

    outcome = await puller.outcome(await puller.request(run_snapshot(registry=source.url)))

    assert outcome.event_type is EventType.SPEC_PULLED, outcome.data
    assert isinstance(outcome.payload(), SpecPulled)
    assert (await puller.bus.specs.get(digest)).data == archive
    assert (await puller.bus.specs.get(spec_digest(spec))).data == spec


async def test_an_archive_that_does_not_match_its_digest_fails_code_invalid_storing_nothing(
    puller: PullerUnderTest, source: SpecSource
) -> None:
    pinned = archive_digest(code_archive({"a.py": "x = 1\n"}))
    swapped = code_archive({"a.py": "x = 2\n"})
    spec = spec_with_code(pinned)
    source.publish(spec)
    source.publish(swapped, file=ARCHIVE)

    failure = await code_failure(puller, source)

    assert pinned in failure.message and archive_digest(swapped) in failure.message
    assert f"code archive {ARCHIVE} of {WORKFLOW}@{VERSION}" in failure.message
    await assert_not_stored(puller, pinned, archive_digest(swapped), spec_digest(spec))


async def test_a_missing_archive_fails_code_invalid_naming_where_it_looked(
    puller: PullerUnderTest, source: SpecSource
) -> None:
    spec = spec_with_code(archive_digest(b"never published"))
    source.publish(spec)

    failure = await code_failure(puller, source)

    assert f"code archive {ARCHIVE} of {WORKFLOW}@{VERSION} cannot be fetched" in failure.message
    await assert_not_stored(puller, spec_digest(spec))


@pytest.mark.parametrize(
    "member", ["/etc/cron.d/evil", "../../evil.py"], ids=["absolute", "dot-dot"]
)
async def test_an_archive_with_a_member_outside_its_root_fails_code_invalid(
    puller: PullerUnderTest, file_source: FileSource, member: str
) -> None:
    archive = code_archive({member: "x"}, raw_members=True)
    spec = spec_with_code(archive_digest(archive))
    file_source.publish(spec)
    file_source.publish(archive, file=ARCHIVE)

    failure = await code_failure(puller, file_source)

    assert repr(member) in failure.message
    await assert_not_stored(puller, archive_digest(archive), spec_digest(spec))
