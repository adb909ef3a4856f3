"""Which local-backend processes ``plnt up`` keeps: every applied local PlntBackend, and
every backend a desired release names (PlntBackends read from a Kubernetes API are not in
the stack's store; a deleted backend keeps its process until its runners are gone)."""

from plnt_cli.local_backends import backends_to_run


def test_applied_backends_and_those_desired_releases_name_get_a_process() -> None:
    assert backends_to_run(applied={"east"}, with_releases=set()) == {"east"}
    assert backends_to_run(applied=set(), with_releases={"gpu-cluster-01"}) == {"gpu-cluster-01"}
    assert backends_to_run(applied={"east"}, with_releases={"west", ""}) == {"east", "west"}
    assert backends_to_run(applied=set(), with_releases=set()) == set()
