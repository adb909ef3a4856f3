"""Kubernetes label selectors evaluated against a set of labels: pure, no API calls.

What ``metav1.LabelSelector`` means (matchLabels and matchExpressions, all ANDed), for
``PlntBackend.spec.allowedNamespaces``. Not a parser of the ``a=b,c in (d)`` string form.
"""

from collections.abc import Mapping

from plnt_common.resources import LabelSelector, LabelSelectorRequirement


def selects(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy every term of ``selector`` (an empty one selects all)."""
    if any(labels.get(key) != value for key, value in selector.match_labels.items()):
        return False
    return all(_meets(requirement, labels) for requirement in selector.match_expressions)


def _meets(requirement: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = requirement.key in labels
    match requirement.operator:
        case "In":
            return present and labels[requirement.key] in requirement.values
        case "NotIn":  # as in Kubernetes: a missing key is not in any set
            return not present or labels[requirement.key] not in requirement.values
        case "Exists":
            return present
        case "DoesNotExist":
            return not present
    return False


def describe(selector: LabelSelector) -> str:
    """``selector`` in kubectl's ``-l`` form, for messages: ``team=a,tier in (x,y),!old``."""
    terms = [f"{key}={value}" for key, value in sorted(selector.match_labels.items())]
    for requirement in selector.match_expressions:
        values = ",".join(requirement.values)
        match requirement.operator:
            case "In":
                terms.append(f"{requirement.key} in ({values})")
            case "NotIn":
                terms.append(f"{requirement.key} notin ({values})")
            case "Exists":
                terms.append(requirement.key)
            case "DoesNotExist":
                terms.append(f"!{requirement.key}")
    return ",".join(terms) or "(everything)"
