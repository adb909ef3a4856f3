"""The local-backend with its default runner command: the real ``plnt_runner`` serves the spec."""

import aiohttp
from local_backend_support import StartBackend, desired_release, http_get, process_gone

from plnt_installer.adapters.local_releases import LocalReleaseBackend
from plnt_local_backend.settings import LocalBackendSettings

NS = "default"
RELEASE = "review-responder-g1"
SAGA = "default.review-responder.1.1"


async def test_the_default_runner_command_starts_a_real_runner_that_answers_invoke(
    start_local_backend: StartBackend, releases: LocalReleaseBackend, spec: str
) -> None:
    default_command = LocalBackendSettings.model_fields["runner_command"].get_default(
        call_default_factory=True
    )
    await start_local_backend(runner_command=default_command)
    await releases.install(desired_release(digest=spec))

    observed = await releases.wait_ready(namespace=NS, release=RELEASE, saga_id=SAGA, timeout_s=30)

    assert (await http_get(f"{observed.url}/healthz"))[0] == 200
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        session.post(f"{observed.url}/invoke", json={"review": "Great coffee!"}) as response,
    ):
        assert response.status == 200, await response.text()
        assert response.headers["x-plnt-revision"] == "1.2.0-g1"
    assert await releases.uninstall(namespace=NS, release=RELEASE, timeout_s=30)
    assert process_gone(observed.pid)
