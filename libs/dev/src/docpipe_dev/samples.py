"""Deterministic sample contracts with their ground truth, for tests, demos and benchmarks.

Document ``i`` depends only on ``(seed, i)``, so a longer list always starts with the shorter
one. Every fact of ``expected`` is stated once, in natural language, in the section where a
reader would look for it; the boilerplate around it never states a competing value.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from importlib.resources import files
from pathlib import Path
from typing import Any

__all__ = [
    "PAGE_CHARS",
    "SampleContract",
    "dummy_document",
    "expected_items",
    "sample_contracts",
    "write_expected",
    "write_samples",
]

PAGE_CHARS = 3000
_MIN_CHARS = 9200
_MAX_TARGET_CHARS = 14400  # one more sentence (< 600 chars) must still fit under 5 pages
_MIN_SECTIONS, _MAX_SECTIONS = 8, 14


@dataclass(frozen=True)
class SampleContract:
    """A contract text and the fields a perfect reader extracts from it."""

    slug: str
    title: str
    text: str
    expected: dict[str, Any]

    @property
    def pages(self) -> float:
        return len(self.text) / PAGE_CHARS


@dataclass(frozen=True)
class _Kind:
    title: str
    provider_roles: list[str]
    client_roles: list[str]
    deliverable: str
    scope_titles: list[str]
    scope_pool: str
    fees_title: str
    value_phrase: str  # what the total value is called in this kind of contract


@dataclass(frozen=True)
class _Jurisdiction:
    law: str  # as written after "the laws of"
    currency: str
    courts: str
    forms: list[tuple[str, str]]  # (legal form suffix, description in the preamble)


@dataclass(frozen=True)
class _Party:
    name: str
    role: str
    description: str
    home: _Jurisdiction


@dataclass
class _Section:
    title: str
    paragraphs: list[str]
    spare: list[str]  # boilerplate not used yet, shuffled; shared by sections of one pool


# title | provider roles | client roles | deliverable | scope sections | scope pool | fees
# section | what the total value is called
_KIND_TABLE = """
MASTER SERVICES AGREEMENT | Supplier, Service Provider | Customer | the Services
 | SERVICES; STATEMENTS OF WORK | services | FEES AND PAYMENT | total fees
SOFTWARE LICENCE AGREEMENT | Licensor | Licensee | the Software
 | LICENCE GRANT; DELIVERY AND INSTALLATION | licence | LICENCE FEES | total licence fees
SUPPLY AGREEMENT | Supplier | Purchaser, Buyer | the Products
 | SUPPLY OF PRODUCTS; ORDERS AND DELIVERY | goods | PRICE AND PAYMENT | total purchase price
CONSULTING AGREEMENT | Consultant | Client, Company | the Consulting Services
 | ENGAGEMENT; DELIVERABLES | advice | FEES AND EXPENSES | total fees
DISTRIBUTION AGREEMENT | Supplier, Manufacturer | Distributor | the Products
 | APPOINTMENT; OBLIGATIONS OF THE DISTRIBUTOR | goods | PURCHASE COMMITMENT AND PAYMENT
 | minimum purchase commitment
EQUIPMENT LEASE AGREEMENT | Lessor | Lessee | the Equipment
 | LEASE OF EQUIPMENT; DELIVERY, USE AND RETURN | equipment | RENT AND PAYMENT | total rent
NON-DISCLOSURE AND SERVICES AGREEMENT | Provider | Company | the Services
 | SERVICES | services | FEES | total fees
MAINTENANCE AND SUPPORT AGREEMENT | Contractor, Service Provider | Customer
 | the Support Services | SUPPORT SERVICES; SERVICE LEVELS | support
 | CHARGES AND PAYMENT TERMS | total charges
SOFTWARE AS A SERVICE AGREEMENT | Provider | Subscriber, Customer
 | the Subscription Services | SUBSCRIPTION SERVICES; SERVICE LEVELS | support
 | SUBSCRIPTION FEES | total subscription fees
PROFESSIONAL SERVICES AGREEMENT | Contractor, Consultant | Client
 | the Professional Services | SCOPE OF SERVICES; PERSONNEL | advice | FEES AND PAYMENT
 | total fees
MANUFACTURING AGREEMENT | Manufacturer | Customer | the Products
 | MANUFACTURE OF PRODUCTS; QUALITY CONTROL | goods | PRICE AND PAYMENT | total contract price
LOGISTICS SERVICES AGREEMENT | Logistics Provider, Carrier | Customer, Shipper
 | the Logistics Services | TRANSPORTATION SERVICES; SERVICE LEVELS | services | CHARGES
 | total charges
MARKETING SERVICES AGREEMENT | Agency | Client | the Campaign Services
 | SCOPE OF SERVICES; APPROVALS | advice | FEES AND PAYMENT | total fees
"""

# law as written after "the laws of" | currency | courts | legal form = preamble description; ...
_JURISDICTION_TABLE = """
the State of Delaware | USD | the state and federal courts in Wilmington, Delaware
 | Inc. = a Delaware corporation; LLC = a Delaware limited liability company
 ; Corp. = a Delaware corporation
the State of New York | USD | the state and federal courts in New York County, New York
 | Inc. = a New York corporation; LLC = a New York limited liability company
the State of California | USD | the courts of San Francisco County, California
 | Inc. = a California corporation
the State of Texas | USD | the courts of Harris County, Texas
 | LLC = a Texas limited liability company; Inc. = a Texas corporation
England and Wales | GBP | the courts of England and Wales
 | Ltd = a company registered in England and Wales with company number {reg}
 ; Limited = a company incorporated in England and Wales
 ; plc = a public limited company incorporated in England and Wales
Scotland | GBP | the Court of Session in Edinburgh
 | Ltd = a company incorporated in Scotland with registered number SC{reg}
Ireland | EUR | the courts of Ireland
 | Limited = a private company limited by shares incorporated in Ireland
Germany | EUR | the courts of Frankfurt am Main
 | GmbH = a limited liability company organised under the laws of Germany
 ; AG = a stock corporation organised under the laws of Germany
France | EUR | the commercial courts of Paris
 | SAS = a société par actions simplifiée incorporated in France
the Netherlands | EUR | the courts of Amsterdam
 | B.V. = a private limited company incorporated in the Netherlands
the Province of Ontario | USD | the courts of Toronto, Ontario | Inc. = an Ontario corporation
Singapore | USD | the courts of Singapore | Pte. Ltd. = a company incorporated in Singapore
"""


def _table_rows(table: str) -> list[list[str]]:
    """Split a table whose rows continue on lines that start with a space."""
    rows = table.strip().replace("\n ", " ").splitlines()
    return [[cell.strip() for cell in row.split("|")] for row in rows]


def _names(cell: str, separator: str) -> list[str]:
    return [name.strip() for name in cell.split(separator)]


def _kind(row: list[str]) -> _Kind:
    title, providers, clients, deliverable, scopes, pool, fees, value = row
    roles = _names(providers, ","), _names(clients, ",")
    return _Kind(title, *roles, deliverable, _names(scopes, ";"), pool, fees, value)


def _jurisdiction(row: list[str]) -> _Jurisdiction:
    law, currency, courts, forms = row
    pairs = [pair.split("=") for pair in forms.split(";")]
    return _Jurisdiction(law, currency, courts, [(f.strip(), d.strip()) for f, d in pairs])


_KINDS = [_kind(row) for row in _table_rows(_KIND_TABLE)]
_JURISDICTIONS = [_jurisdiction(row) for row in _table_rows(_JURISDICTION_TABLE)]


def _words(text: str) -> list[str]:
    return text.split()


_STEMS = _words("""
    Acme Borealis Cobalt Dunmore Elmstead Fairhaven Granite Halcyon Ironbridge Juniper
    Kestrel Lumen Meridian Northwind Orion Pinnacle Quayside Redwood Sterling Tamarack
    Umber Vantage Westbrook Yarrow Zephyr Alder Bramble Crescent Driftwood Ember Foxglove
    Glenmore Harbourview Larkspur Moorgate Oakhurst Silverline
""")
_INDUSTRIES = _words("""
    Analytics Logistics Retail Software Systems Manufacturing Health Energy Foods Robotics
    Media Pharma Engineering Networks Labs Marine Textiles Holdings Consulting Data
    Biotech Components Freight
""")
_FIRST_NAMES = _words("""
    Alice Benjamin Chloe Daniel Elena Farid Grace Hiroshi Isabel James Katarina Liam Maya
    Nikolai Olivia Pieter Rachel Samuel
""")
_LAST_NAMES = _words("""
    Whitfield Okafor Lindqvist Moreau Castellano Brennan Nakamura Schneider Patel Hughes
    Kowalski Fischer Oduya Grant
""")
_MONTHS = _words("""
    January February March April May June July August September October November December
""")
_UNITS = _words("""
    zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
    fifteen sixteen seventeen eighteen nineteen
""")
_TENS = ["", "", *_words("twenty thirty forty fifty sixty seventy eighty ninety")]
_SIGNATORY_TITLES = (
    "Chief Executive Officer",
    "Chief Financial Officer",
    "General Counsel",
    "Managing Director",
    "Director",
    "Vice President, Procurement",
    "Chief Operating Officer",
)
_RESIDENCES = ("London, United Kingdom", "Austin, Texas", "Dublin, Ireland", "Berlin, Germany")
_SMALL_WORDS = frozenset({"a", "an", "and", "as", "of", "the"})

# Boilerplate sentences by pool, kept as data beside this module (see its header).
_BOILERPLATE = files("docpipe_dev").joinpath("sample_clauses.txt").read_text(encoding="utf-8")


def _pools(text: str) -> dict[str, list[str]]:
    pools: dict[str, list[str]] = {}
    lines = text.strip().replace("\n ", " ").splitlines()
    for line in (line for line in lines if not line.startswith("#")):
        if line.startswith("["):
            sentences = pools.setdefault(line.strip("[]"), [])
        else:
            sentences.append(line)
    return pools


_POOLS = _pools(_BOILERPLATE)
_RENEWALS = (
    "Thereafter, this Agreement shall automatically renew for successive periods of twelve (12) "
    "months unless either Party notifies the other in writing of its intention not to renew at "
    "least sixty (60) days before the end of the then-current term.",
    "Upon expiry of the Initial Term, this Agreement will renew automatically for further "
    "periods of one (1) year unless terminated in accordance with this Section.",
)
_NO_RENEWALS = (
    "This Agreement shall not renew automatically; any extension beyond the Initial Term "
    "requires a written amendment signed by both Parties.",
    "This Agreement shall expire at the end of the Initial Term and there shall be no automatic "
    "renewal.",
)
_OPTIONAL_TITLES = _names(
    "WARRANTIES; INDEMNIFICATION; INTELLECTUAL PROPERTY; DATA PROTECTION; INSURANCE; "
    "FORCE MAJEURE; ASSIGNMENT AND SUBCONTRACTING; NOTICES; NON-SOLICITATION; AUDIT AND RECORDS; "
    "COMPLIANCE WITH LAWS",
    ";",
)
_GOVERNING_LAW_TITLES = ("GOVERNING LAW", "GOVERNING LAW AND JURISDICTION", "DISPUTE RESOLUTION")
_LIABILITY_TITLES = ("LIMITATION OF LIABILITY", "LIABILITY")


def sample_contracts(count: int = 8, seed: int = 0) -> list[SampleContract]:
    """Return ``count`` contracts; contract ``i`` depends only on ``(seed, i)``."""
    # A seed-wide permutation of the kinds makes any run of 13 neighbours cover every kind.
    kinds = random.Random(f"docpipe-samples:{seed}").sample(_KINDS, len(_KINDS))
    return [_contract(seed, i, kinds[i % len(kinds)]) for i in range(count)]


def expected_items(count: int = 8, seed: int = 0) -> list[dict[str, Any]]:
    """The contracts as an evaluation set of document_extract's extract_fields: each an
    upload line with its text and the fields it states (what a perfect reader gives)."""
    return [
        {"document": {"id": c.slug, "text": c.text}, "expected": {"fields": c.expected}}
        for c in sample_contracts(count, seed)
    ]


def write_expected(path: Path, count: int = 8, seed: int = 0) -> Path:
    """Write :func:`expected_items` to ``path`` as JSON lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps(item, ensure_ascii=False) + "\n" for item in expected_items(count, seed))
    path.write_text("".join(lines), encoding="utf-8")
    return path


def dummy_document() -> SampleContract:
    """Return the empty document that the pipeline must process without failing."""
    return SampleContract(slug="00-dummy-empty", title="", text="", expected={})


def write_samples(
    directory: Path,
    count: int = 8,
    seed: int = 0,
    *,
    with_dummy: bool = False,
    formats: Sequence[str] = ("text",),
) -> list[Path]:
    """Write each contract (dummy first if asked, as text only) in each of ``formats``
    (docpipe_dev.sample_files.FORMATS: ``<slug>.txt``, ``.pdf``, ``.docx``, ``.scan.pdf``)
    and return their paths."""
    from docpipe_dev.sample_files import write_contract

    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    if with_dummy:
        dummy = dummy_document()
        paths.append(write_contract(directory, dummy.slug, dummy.text, "text"))
    for i, contract in enumerate(sample_contracts(count, seed)):
        paths += [
            write_contract(directory, contract.slug, contract.text, fmt, seed=i) for fmt in formats
        ]
    return paths


def _contract(seed: int, index: int, kind: _Kind) -> SampleContract:
    rng = random.Random(f"docpipe-samples:{seed}:{index}")
    parties = [
        _party(rng, rng.choice(kind.provider_roles)),
        _party(rng, rng.choice(kind.client_roles)),
    ]
    if rng.random() < 0.15:
        parties.append(_party(rng, "Guarantor"))
    governing = rng.choice([parties[0].home, parties[1].home, rng.choice(_JURISDICTIONS)])
    currency = governing.currency if rng.random() < 0.7 else rng.choice(("USD", "EUR", "GBP"))
    effective = date(2019, 1, 1) + timedelta(days=rng.randrange(7 * 365))
    value = rng.choice((12, 24, 48, 60, 96, 120, 180, 240, 360, 480, 720, 1200, 2400, 4800))
    value *= rng.choice((250, 500, 1000, 1250, 2500))
    expected: dict[str, Any] = {
        "parties": [{"name": party.name, "role": party.role} for party in parties],
        "contract_type": kind.title.lower(),
        "effective_date": effective.isoformat(),
        "term_months": rng.choice((6, 12, 12, 18, 24, 24, 36, 36, 48, 60)),
        "total_value": {"amount": value, "currency": currency},
        "payment_terms_days": rng.choice((14, 15, 30, 30, 30, 45, 60, 60, 90)),
        "termination_notice_days": rng.choice((30, 30, 45, 60, 60, 90, 90, 120, 180)),
        "liability_cap": {"amount": _liability_cap(rng, value), "currency": currency},
        "confidentiality_years": rng.choice((2, 3, 3, 5, 5, 5, 7, 10)),
        "governing_law": governing.law.removeprefix("the "),
        "auto_renewal": rng.random() < 0.5,
    }
    words = {"p": parties[0].role, "c": parties[1].role, "d": kind.deliverable}
    sections = _sections(
        rng, kind, _facts(rng, kind, expected, governing, words), words, guarantor=len(parties) > 2
    )
    head = _preamble(rng, kind, index, effective, parties)
    tail = _signature_block(rng, parties)
    _pad(rng, sections, len(head) + len(tail), words)
    kind_slug = kind.title.lower().removesuffix(" agreement").replace(" ", "-")
    party_slug = parties[0].name.lower().replace(".", "").replace(" ", "-")
    return SampleContract(
        slug=f"{index + 1:02d}-{kind_slug}-{party_slug}",
        title=kind.title,
        text=head + _render(sections) + tail,
        expected=expected,
    )


def _party(rng: random.Random, role: str) -> _Party:
    home = rng.choice(_JURISDICTIONS)
    if role in ("Consultant", "Contractor") and rng.random() < 0.2:
        name = f"{rng.choice(_FIRST_NAMES)} {rng.choice(_LAST_NAMES)}"
        return _Party(name, role, f"an individual residing in {rng.choice(_RESIDENCES)}", home)
    form, description = rng.choice(home.forms)
    name = f"{rng.choice(_STEMS)} {rng.choice(_INDUSTRIES)} {form}"
    registration = rng.randrange(10_000_000, 100_000_000)
    return _Party(name, role, description.format(reg=registration), home)


def _liability_cap(rng: random.Random, value: int) -> int:
    if rng.random() < 0.3:
        return rng.choice((250_000, 500_000, 1_000_000, 2_000_000, 5_000_000))
    return int(value * rng.choice((0.5, 1, 1, 1.5, 2, 3, 5)))


def _sections(
    rng: random.Random,
    kind: _Kind,
    facts: dict[str, list[str]],
    words: dict[str, str],
    *,
    guarantor: bool,
) -> list[_Section]:
    """Choose 8 to 14 sections in a conventional order, each opening with its facts."""
    chosen = [(title, kind.scope_pool) for title in kind.scope_titles[: rng.randint(1, 2)]]
    chosen += [(kind.fees_title, "FEES"), ("TERM AND TERMINATION", "TERM")]
    closing = [
        ("CONFIDENTIALITY", "CONFIDENTIALITY"),
        (rng.choice(_LIABILITY_TITLES), "LIABILITY"),
        *([("PARENT COMPANY GUARANTEE", "PARENT COMPANY GUARANTEE")] if guarantor else []),
        (rng.choice(_GOVERNING_LAW_TITLES), "GOVERNING LAW"),
        ("GENERAL PROVISIONS", "GENERAL PROVISIONS"),
    ]
    free = rng.randint(_MIN_SECTIONS, _MAX_SECTIONS) - len(chosen) - len(closing)
    if free > 0 and rng.random() < 0.5:
        chosen.insert(0, ("DEFINITIONS", "DEFINITIONS"))
        free -= 1
    chosen += [(title, title) for title in rng.sample(_OPTIONAL_TITLES, max(free, 0))]
    spares: dict[str, list[str]] = {}  # sections that share a pool share its spare list
    sections = []
    for title, pool_name in chosen + closing:
        if pool_name not in spares:
            pool = rng.sample(_POOLS[pool_name], len(_POOLS[pool_name]))
            spares[pool_name] = [_sentence(text, words) for text in pool]
        spare = spares[pool_name]
        opening = facts.get(pool_name) or [spare.pop() + " " + spare.pop()]
        sections.append(_Section(title=title, paragraphs=opening, spare=spare))
    return sections


def _sentence(template: str, words: dict[str, str]) -> str:
    text = template.format(**words)
    return text[0].upper() + text[1:]


def _facts(
    rng: random.Random,
    kind: _Kind,
    expected: dict[str, Any],
    governing: _Jurisdiction,
    words: dict[str, str],
) -> dict[str, list[str]]:
    """Return, by pool name, the paragraphs that state the ground truth, each fact once."""
    p, c, d = words["p"], words["c"], words["d"]
    value, currency = expected["total_value"]["amount"], expected["total_value"]["currency"]
    money = _money(rng, value, currency)
    fees = rng.choice(
        (
            f"In consideration of {d}, {c} shall pay {p} a total of {money} over the Initial Term.",
            f"The {kind.value_phrase} under this Agreement shall be {money}, exclusive of "
            "applicable taxes.",
            f'The total contract value of this Agreement is {money} (the "Contract Value").',
        )
    )
    if value % 4 == 0 and rng.random() < 0.5:
        instalment = _money(rng, value // 4, currency)
        fees += f" This amount shall be invoiced in four (4) quarterly instalments of {instalment}."
    days = expected["payment_terms_days"]
    payment = rng.choice(
        (
            f"{c} shall pay each undisputed invoice within {_spelled(days)} days of the date of "
            "the invoice.",
            f"Invoices are payable net {days} days from the date of receipt.",
            f"Payment of each invoice shall be made no later than {_spelled(days)} days after "
            f"receipt by {c} of a valid invoice.",
        )
    )
    months = expected["term_months"]
    term = rng.choice(
        (
            "This Agreement shall commence on the Effective Date and continue for an initial term "
            f'of {_spelled(months)} months (the "Initial Term").',
            "Unless terminated earlier, this Agreement shall remain in force for a period of "
            f'{_spelled(months)} months from the Effective Date (the "Initial Term").',
        )
    )
    if months % 12 == 0 and rng.random() < 0.4:
        years = _spelled(months // 12) + (" years" if months > 12 else " year")
        term = (
            f"This Agreement has an initial term of {years} from the Effective Date "
            '(the "Initial Term").'
        )
    renewal = rng.choice(_RENEWALS if expected["auto_renewal"] else _NO_RENEWALS)
    notice = expected["termination_notice_days"]
    termination = rng.choice(
        (
            "Either Party may terminate this Agreement for convenience by giving the other Party "
            f"not less than {_spelled(notice)} days' prior written notice.",
            f"{c} may terminate this Agreement without cause on {notice} days' written notice "
            f"to {p}.",
            f"Either Party may terminate this Agreement at any time on {_spelled(notice)} days' "
            "written notice for any reason.",
        )
    )
    secrecy = _spelled(expected["confidentiality_years"])
    confidentiality = rng.choice(
        (
            f"The obligations of confidentiality in this Section shall survive for {secrecy} years "
            "after the termination or expiry of this Agreement.",
            "Each Party shall keep the other Party's Confidential Information confidential during "
            f"the term of this Agreement and for a period of {secrecy} years thereafter.",
        )
    )
    cap = _money(rng, expected["liability_cap"]["amount"], currency)
    liability = rng.choice(
        (
            "Except for liability arising from fraud or wilful misconduct, each Party's total "
            "aggregate liability arising out of or in connection with this Agreement shall not "
            f"exceed {cap}.",
            f"The maximum aggregate liability of {p} under this Agreement, whether in contract, "
            f"tort (including negligence) or otherwise, is limited to {cap}.",
            "In no event shall either Party's cumulative liability under this Agreement exceed "
            f"{cap} in the aggregate.",
        )
    )
    law = rng.choice(
        (
            "This Agreement and any dispute arising out of or in connection with it shall be "
            f"governed by and construed in accordance with the laws of {governing.law}.",
            f"This Agreement is governed by the laws of {governing.law}, without regard to its "
            "conflict of laws rules.",
        )
    )
    courts = (
        f"The Parties submit to the exclusive jurisdiction of {governing.courts} in respect of "
        "any dispute arising under this Agreement."
    )
    if rng.random() < 0.5:
        term_paragraphs = [f"{term} {renewal}", termination]
    else:
        term_paragraphs = [term, f"{renewal} {termination}"]
    return {
        "FEES": [fees, payment],
        "TERM": term_paragraphs,
        "CONFIDENTIALITY": [confidentiality],
        "LIABILITY": [liability],
        "GOVERNING LAW": [f"{law} {courts}"],
    }


def _pad(rng: random.Random, sections: list[_Section], fixed: int, words: dict[str, str]) -> None:
    """Grow the sections until the text is 3 to 5 pages long, never repeating a sentence."""
    target = rng.randint(_MIN_CHARS, _MAX_TARGET_CHARS)
    total = fixed + len(_render(sections))
    used: set[str] = set()
    while total < target:
        section = rng.choice(sections)
        wanted = rng.randint(1, 3)
        sentences: list[str] = []
        while total < target and len(sentences) < wanted:
            sentence = section.spare.pop() if section.spare else _generic_sentence(rng, words)
            if sentence not in used:
                used.add(sentence)
                sentences.append(sentence)
                total += len(sentence) + 1
        section.paragraphs.append(" ".join(sentences))
        total += len(f"{len(sections)}.{len(section.paragraphs)} \n\n")


def _generic_sentence(rng: random.Random, words: dict[str, str]) -> str:
    """Compose an obligation that fits any section once its own boilerplate is used up."""
    subject = rng.choice(("each Party", words["p"], words["c"]))
    opening = rng.choice(_POOLS["opening"]) + " " if rng.random() < 0.6 else ""
    manner = " " + rng.choice(_POOLS["manner"]) if rng.random() < 0.5 else ""
    duty, matter = rng.choice(_POOLS["duty"]), rng.choice(_POOLS["matter"])
    return _sentence(f"{opening}{subject} {duty} {matter}{manner}.", words)


def _render(sections: list[_Section]) -> str:
    parts = []
    for number, section in enumerate(sections, start=1):
        parts.append(f"{number}. {section.title}\n\n")
        parts += [f"{number}.{n} {text}\n\n" for n, text in enumerate(section.paragraphs, 1)]
    return "".join(parts)


def _preamble(
    rng: random.Random, kind: _Kind, index: int, effective: date, parties: list[_Party]
) -> str:
    named = [f'{party.name}, {party.description} ("{party.role}")' for party in parties]
    when = rng.choice(("is entered into as of", "is made and entered into on", "is dated"))
    initials = "".join(word[0] for word in kind.title.split())
    return (
        f"{kind.title}\n\nContract reference: {initials}-{effective.year}-{index + 1:05d}\n\n"
        f'This {_title_case(kind.title)} (the "Agreement") {when} {_date_text(rng, effective)} '
        f'(the "Effective Date") by and between {", ".join(named[:-1])}, and {named[-1]}. '
        'The parties are referred to individually as a "Party" and together as the "Parties".'
        f"\n\nWHEREAS {parties[0].name} has the expertise and resources required to provide "
        f"{kind.deliverable}, and {parties[1].name} wishes to obtain the same on the terms set "
        "out below; NOW, THEREFORE, the Parties agree as follows:\n\n"
    )


def _signature_block(rng: random.Random, parties: list[_Party]) -> str:
    blocks = [
        "IN WITNESS WHEREOF, the Parties have executed this Agreement by their duly authorised "
        "representatives as of the Effective Date.\n"
    ]
    for party in parties:
        person = f"{rng.choice(_FIRST_NAMES)} {rng.choice(_LAST_NAMES)}"
        blocks.append(
            f"{party.name.upper()}\n\nBy: ______________________\nName: {person}\n"
            f"Title: {rng.choice(_SIGNATORY_TITLES)}\n"
        )
    return "\n".join(blocks)


def _money(rng: random.Random, amount: int, currency: str) -> str:
    symbols = {"USD": ("USD ", "$", "US$"), "EUR": ("EUR ", "€"), "GBP": ("GBP ", "£")}
    return rng.choice(symbols[currency]) + f"{amount:,}" + rng.choice(("", "", ".00"))


def _spelled(number: int) -> str:
    """Return a number the way contracts write it: ``sixty (60)``."""
    return f"{_number_words(number)} ({number})"


def _number_words(number: int) -> str:
    if number < 20:
        return _UNITS[number]
    if number < 100:
        tens, units = divmod(number, 10)
        return _TENS[tens] + (f"-{_UNITS[units]}" if units else "")
    hundreds, rest = divmod(number, 100)
    return f"{_UNITS[hundreds]} hundred" + (f" and {_number_words(rest)}" if rest else "")


def _date_text(rng: random.Random, day: date) -> str:
    month = _MONTHS[day.month - 1]
    suffix = "th" if 11 <= day.day <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day.day % 10, "th")
    return rng.choice(
        (
            f"{month} {day.day}, {day.year}",
            f"{day.day} {month} {day.year}",
            f"the {day.day}{suffix} day of {month}, {day.year}",
        )
    )


def _title_case(upper: str) -> str:
    """Return ``SOFTWARE AS A SERVICE AGREEMENT`` as ``Software as a Service Agreement``."""
    words = upper.lower().split()
    return " ".join(
        word if i and word in _SMALL_WORDS else "-".join(w.capitalize() for w in word.split("-"))
        for i, word in enumerate(words)
    )
