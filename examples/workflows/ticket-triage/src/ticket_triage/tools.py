"""``crm.lookup``: the customer behind a ticket, from the team's CRM.

The example's CRM is the table bundled beside this module (``customers.csv``); a team
would query its own CRM here instead. Customers type their company's name as they like
("ACME corp", "Globex Inc."), so the name is matched approximately.

The one requirement, ``textdistance`` (``runtime.code.requirements`` in workflow.yaml), is
a pure-Python package: its wheel installs on any platform without a compiler, and the
tests stand in for it offline with a wheel of the same name.
"""

import csv
import importlib.resources
from typing import Any

import textdistance

MIN_SIMILARITY = 0.6
"""Below this normalized Levenshtein similarity a name matches no customer."""


def _customers() -> list[dict[str, str]]:
    table = importlib.resources.files("ticket_triage").joinpath("customers.csv")
    return list(csv.DictReader(table.read_text(encoding="utf-8").splitlines()))


def _normalized(name: str) -> str:
    words = name.lower().replace(".", " ").replace(",", " ").split()
    return " ".join(w for w in words if w not in {"inc", "corp", "corporation", "ltd", "llc"})


def lookup(step: dict[str, Any]) -> dict[str, Any]:
    """The CRM record of ``input.customer``: ``{"found", "name", "account", "plan",
    "unpaid_invoices"}``; an unknown customer is ``found: false`` on the free plan."""
    asked = _normalized(str(step["input"].get("customer", "")))
    best, score = None, 0.0
    for row in _customers():
        similarity = textdistance.levenshtein.normalized_similarity(asked, _normalized(row["name"]))
        if similarity > score:
            best, score = row, similarity
    if best is None or score < MIN_SIMILARITY:
        return {"found": False, "name": "", "account": "", "plan": "free", "unpaid_invoices": 0}
    return {
        "found": True,
        "name": best["name"],
        "account": best["account"],
        "plan": best["plan"],
        "unpaid_invoices": int(best["unpaid_invoices"]),
    }
