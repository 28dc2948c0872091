"""Writing the summary, key points and risk flags of a contract from its merged fields."""

from __future__ import annotations

from typing import Any

__all__ = ["write_summary"]

_MAX_KEY_POINTS = 8
_MAX_RISK_FLAGS = 5


def write_summary(fields: dict[str, Any], section_titles: list[str]) -> dict[str, Any]:
    """Return ``summary`` (2-4 sentences), 1-8 ``key_points`` and 0-5 ``risk_flags``."""
    return {
        "summary": _summary(fields, section_titles),
        "key_points": _key_points(fields)[:_MAX_KEY_POINTS],
        "risk_flags": _risk_flags(fields)[:_MAX_RISK_FLAGS],
    }


def _summary(fields: dict[str, Any], section_titles: list[str]) -> str:
    kind = fields.get("contract_type") or "contract"
    parties = [p for p in fields.get("parties") or [] if isinstance(p, dict) and p.get("name")]
    if parties:
        named = [f"{p['name']} ({p['role']})" if p.get("role") else p["name"] for p in parties]
        between = ", ".join(named[:-1]) + " and " + named[-1] if len(named) > 1 else named[0]
        first = f"This {kind} is made between {between}"
    else:
        first = f"This {kind} does not name its parties"
    if fields.get("effective_date"):
        first += f", effective {fields['effective_date']}"
    value, months = _money(fields.get("total_value")), fields.get("term_months")
    if value and months:
        second = f"It is worth {value} and runs for an initial term of {months} months."
    elif value or months:
        second = f"It is worth {value}." if value else f"It runs for {months} months."
    else:
        second = "It states neither a total value nor a term."
    sentences = [first + ".", second]
    if fields.get("governing_law"):
        sentences.append(f"It is governed by the laws of {fields['governing_law']}.")
    if section_titles:
        sentences.append(f"The document has {len(section_titles)} sections.")
    return " ".join(sentences)


def _key_points(fields: dict[str, Any]) -> list[str]:
    points = []
    if value := _money(fields.get("total_value")):
        points.append(f"Total value of {value}")
    if fields.get("payment_terms_days"):
        points.append(f"Invoices are payable within {fields['payment_terms_days']} days")
    if fields.get("term_months"):
        renewal = {True: ", renewing automatically", False: ", with no automatic renewal"}
        suffix = renewal.get(fields["auto_renewal"], "") if "auto_renewal" in fields else ""
        points.append(f"Initial term of {fields['term_months']} months{suffix}")
    if fields.get("termination_notice_days"):
        days = fields["termination_notice_days"]
        points.append(f"Termination for convenience on {days} days' notice")
    if cap := _money(fields.get("liability_cap")):
        points.append(f"Liability capped at {cap}")
    if fields.get("confidentiality_years"):
        points.append(f"Confidentiality lasts {fields['confidentiality_years']} years")
    if fields.get("governing_law"):
        points.append(f"Governed by the laws of {fields['governing_law']}")
    if fields.get("effective_date"):
        points.append(f"Effective from {fields['effective_date']}")
    return points or ["The document states none of the expected contract terms"]


def _risk_flags(fields: dict[str, Any]) -> list[str]:
    flags = []
    value, cap = _amount(fields.get("total_value")), _amount(fields.get("liability_cap"))
    if value and cap and cap > 2 * value:
        flags.append("Liability cap is more than twice the total contract value")
    if value and cap and cap < value / 2:
        flags.append("Liability cap is less than half the total contract value")
    if fields.get("auto_renewal") is True:
        flags.append("Renews automatically unless notice of non-renewal is given in time")
    if (fields.get("termination_notice_days") or 0) >= 90:
        flags.append(f"Long termination notice of {fields['termination_notice_days']} days")
    if (fields.get("payment_terms_days") or 0) >= 60:
        flags.append(f"Long payment terms of {fields['payment_terms_days']} days")
    if 0 < (fields.get("confidentiality_years") or 0) <= 2:
        flags.append("Short confidentiality period")
    return flags


def _amount(money: Any) -> float | None:
    if isinstance(money, dict) and isinstance(money.get("amount"), int | float):
        return float(money["amount"])
    return None


def _money(money: Any) -> str | None:
    amount = _amount(money)
    if amount is None:
        return None
    currency = money.get("currency") or ""
    digits = f"{amount:,.0f}" if amount.is_integer() else f"{amount:,.2f}"
    return f"{currency} {digits}".strip()
