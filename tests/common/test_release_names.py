"""Release names: one per namespace, run and generation, within Helm's 53 characters."""

import re

import pytest

from plnt_common.releases import (
    HELM_RELEASE_NAME_MAX,
    may_be_release_of,
    release_name,
    release_of_revision,
    revision_label,
    run_of_release,
)

DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_a_short_name_is_namespace_run_and_generation() -> None:
    assert release_name("team-a", "review-responder", 3) == "team-a-review-responder-g3"


def test_two_namespaces_runs_of_one_name_never_meet() -> None:
    assert release_name("team-a", "review-responder", 1) != release_name(
        "team-b", "review-responder", 1
    )


@pytest.mark.parametrize(
    ("namespace", "run"),
    [
        ("a" * 63, "b" * 63),
        ("team-a", "r" * 45),
        ("x" * 31, "y-" * 20 + "z"),  # a cut that would end on "-"
    ],
)
def test_a_long_name_is_cut_to_helm_s_limit_with_a_hash_and_stays_a_label(
    namespace: str, run: str
) -> None:
    name = release_name(namespace, run, 12)
    assert len(name) <= HELM_RELEASE_NAME_MAX
    assert DNS_1123_LABEL.match(name), name
    assert re.search(r"-[0-9a-f]{8}$", name), name
    assert "--" not in name, name  # the cut's trailing "-" is not doubled before the hash


def test_long_names_sharing_a_head_differ_by_their_hash() -> None:
    namespace, run = "n" * 40, "shared-head-" + "x" * 30
    names = {release_name(namespace, run, g) for g in (1, 2)} | {
        release_name(namespace, run + "-other", 1)
    }
    assert len(names) == 3
    assert all(len(n) == HELM_RELEASE_NAME_MAX for n in names)


def test_the_release_of_a_revision_is_named_again_for_long_names_too() -> None:
    namespace, run = "team-with-a-long-namespace-name", "a-run-with-a-long-name-too"
    assert release_of_revision(namespace, run, revision_label("1.2.0", 4)) == release_name(
        namespace, run, 4
    )
    assert release_of_revision(namespace, run, "no-generation") == ""


def test_run_of_release_undoes_only_an_unhashed_name_of_its_namespace() -> None:
    assert run_of_release("team-a-shop-g2", namespace="team-a") == "shop"
    assert run_of_release("team-a-shop-g2", namespace="team-b") == ""
    hashed = release_name("n" * 40, "r" * 40, 1)
    assert run_of_release(hashed, namespace="n" * 40) == ""


@pytest.mark.parametrize(
    ("namespace", "run"),
    [("team-a", "shop"), ("n" * 40, "r" * 40), ("team-with-a-long-name", "a-long-run-name-x")],
)
def test_a_run_s_own_release_names_pass_the_cheap_filter(namespace: str, run: str) -> None:
    for generation in (1, 12, 345):
        name = release_name(namespace, run, generation)
        assert may_be_release_of(name, namespace=namespace, run_name=run), name


def test_other_runs_release_names_do_not_pass_the_cheap_filter() -> None:
    assert not may_be_release_of("team-a-shop-g1", namespace="team-b", run_name="shop")
    assert not may_be_release_of("team-a-shop-g1", namespace="team-a", run_name="sho")
    assert not may_be_release_of("team-a-shopper-g1", namespace="team-a", run_name="shop")
    long_other = release_name("n" * 40, "other-run-with-a-long-name", 1)
    assert not may_be_release_of(long_other, namespace="n" * 40, run_name="r" * 40)
