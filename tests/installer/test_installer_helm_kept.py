"""The kept previous revision on the Helm backend: the installer demotes the old stable to
role ``previous`` by an upgrade of its recorded values (pods untouched), and the chart
renders those values with real Helm at replicas.min without an autoscaler."""

from typing import Any

import helm_python
import yaml
from installer_helm_support import (
    CHART,
    HELM_NS,
    RELEASE,
    RUN,
    RUN_NS,
    FakeHelm,
    MemorySpecs,
    desired,
    promoted,
    spec_pulled,
)

from plnt_common.releases import ReleaseRole
from plnt_installer.adapters.helm.backend import HelmReleaseBackend


def rendered(values: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    files = helm_python.Chart.load(CHART).render(
        values, name=RELEASE, namespace=HELM_NS, is_install=False, is_upgrade=True
    )
    texts = [text for path, text in files.items() if not path.endswith("NOTES.txt")]
    docs = [doc for text in texts for doc in yaml.safe_load_all(text) if doc]
    return [doc for doc in docs if isinstance(doc, dict) and doc.get("kind") == kind]


async def test_the_previous_stable_is_kept_by_an_upgrade_to_role_previous_at_replicas_min(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm, specs: MemorySpecs
) -> None:
    pulled = spec_pulled()
    release = desired(pulled)
    await helm_backend.install(release, pulled=pulled)
    await helm_backend.install(promoted(release))
    as_stable = fake_helm.revisions(RELEASE)[-1]["values"]
    as_stable["autoscaling"]["targetInvocationsPerSecond"] = 5  # an HPA while it serves
    specs.reads.clear()

    await helm_backend.install(release.model_copy(update={"role": ReleaseRole.PREVIOUS}))

    kept = fake_helm.revisions(RELEASE)[-1]["values"]
    assert kept["role"] == "previous"
    assert specs.reads == []  # the recorded values, not a fresh render: the pods stay
    listed = await helm_backend.releases(namespace=RUN_NS, run_name=RUN)
    assert [(r.release, r.role) for r in listed] == [(RELEASE, ReleaseRole.PREVIOUS)]

    assert rendered(as_stable, "HorizontalPodAutoscaler")
    kept["autoscaling"]["targetInvocationsPerSecond"] = 5
    assert rendered(kept, "HorizontalPodAutoscaler") == []
    (deployment,) = rendered(kept, "Deployment")
    assert deployment["spec"]["replicas"] == kept["replicas"]["min"] == 1
