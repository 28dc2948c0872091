"""Deterministic sample non-disclosure agreements, for the built-in ``nda_review:v1``.

Document ``i`` depends only on ``(seed, i)``. Each NDA is one-way or mutual, with numbered
clause headings on lines of their own and a mix of ordinary and onerous terms, so that a
reviewer (or a model) has something to flag.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SampleNda", "sample_ndas", "write_ndas"]

_COMPANIES = (
    "Acme Analytics Inc.",
    "Borealis Logistics LLC",
    "Cobalt Software Ltd",
    "Dunmore Foods GmbH",
    "Elmstead Robotics B.V.",
    "Fairhaven Health Inc.",
    "Granite Energy plc",
    "Halcyon Media SAS",
)

# Clause title -> (an ordinary wording, an onerous one); {d} is the disclosing side, {r} the
# receiving side, {n} a number of years.
_CLAUSES = {
    "DEFINITION OF CONFIDENTIAL INFORMATION": (
        "Confidential Information means information that {d} marks as confidential when it "
        "is disclosed, or that a reasonable person would understand to be confidential.",
        "Confidential Information means all information of any kind that {r} receives from "
        "{d} or learns in any way, whether or not it is marked or even identifiable as such.",
    ),
    "EXCLUSIONS": (
        "The obligations do not apply to information that is public, was known to {r} "
        "before disclosure, or is independently developed without use of it.",
        "No exclusion applies: information remains Confidential Information even after it "
        "becomes public through no fault of {r}.",
    ),
    "OBLIGATIONS OF THE RECEIVING PARTY": (
        "{r} shall use the Confidential Information only to evaluate the proposed "
        "transaction and protect it with reasonable care.",
        "{r} shall protect the Confidential Information with the highest degree of care and "
        "shall not disclose it even to its own employees without the prior written consent "
        "of {d}.",
    ),
    "TERM": (
        "The obligations of confidentiality continue for {n} years after the date of disclosure.",
        "The obligations of confidentiality continue without limit in time and survive any "
        "termination of this Agreement.",
    ),
    "REMEDIES": (
        "Each party may seek injunctive relief for a breach, in addition to damages proven "
        "before a competent court.",
        "{r} shall pay liquidated damages of 500,000 for each breach, without proof of loss, "
        "in addition to any other remedy.",
    ),
    "NON-SOLICITATION": (
        "For one year neither party shall actively solicit the other's employees who were "
        "involved in the evaluation.",
        "For {n} years {r} shall not hire or engage any person who worked for {d} at any time.",
    ),
    "RETURN OF INFORMATION": (
        "On request, {r} shall return or destroy the Confidential Information, except copies "
        "kept under a legal obligation.",
        "On request, {r} shall return all Confidential Information within 24 hours and certify "
        "under oath that no copy, note or derivative remains anywhere.",
    ),
    "GOVERNING LAW": (
        "This Agreement is governed by the laws of England and Wales.",
        "This Agreement is governed by the laws chosen by {d} at the time of any dispute.",
    ),
}


@dataclass(frozen=True)
class SampleNda:
    slug: str
    title: str
    text: str
    onerous: tuple[str, ...]  # the clause titles worded against the receiving party


def sample_ndas(count: int = 2, seed: int = 0) -> list[SampleNda]:
    return [_nda(random.Random(f"nda:{seed}:{i}"), i) for i in range(count)]


def write_ndas(folder: Path, count: int = 2, seed: int = 0) -> list[Path]:
    """Write ``sample_ndas`` as ``<slug>.txt`` files; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for nda in sample_ndas(count, seed):
        path = folder / f"{nda.slug}.txt"
        path.write_text(nda.text, encoding="utf-8")
        paths.append(path)
    return paths


def _nda(rng: random.Random, index: int) -> SampleNda:
    discloser, recipient = rng.sample(_COMPANIES, 2)
    mutual = rng.random() < 0.5
    title = "MUTUAL NON-DISCLOSURE AGREEMENT" if mutual else "NON-DISCLOSURE AGREEMENT"
    d, r = ("each party", "each party") if mutual else (discloser, recipient)
    lines = [
        title,
        "",
        f"This Agreement is made between {discloser} and {recipient} so that "
        + ("each may" if mutual else f"{discloser} may")
        + " disclose confidential information for the evaluation of a possible business "
        "relationship.",
    ]
    onerous = []
    for number, (clause, wordings) in enumerate(_CLAUSES.items(), start=1):
        harsh = rng.random() < 0.35
        if harsh:
            onerous.append(clause)
        wording = wordings[harsh].format(d=d, r=r, n=rng.choice((2, 3, 5)))
        lines += ["", f"{number}. {clause}", wording[0].upper() + wording[1:]]
    lines += ["", f"Signed for {discloser} and for {recipient}."]
    slug = f"nda-{index + 1:02d}-{recipient.split()[0].lower()}"
    return SampleNda(slug, title, "\n".join(lines) + "\n", tuple(onerous))
