"""The sample contracts: deterministic, 3-5 pages, varied, and truthful about their facts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from docpipe_dev.samples import SampleContract, dummy_document, sample_contracts, write_samples

HEADING = re.compile(r"^(\d+)\. ([A-Z][A-Z ,&\-]+)$", re.M)
FIELDS = [
    "parties",
    "contract_type",
    "effective_date",
    "term_months",
    "total_value",
    "payment_terms_days",
    "termination_notice_days",
    "liability_cap",
    "confidentiality_years",
    "governing_law",
    "auto_renewal",
]


@pytest.fixture(scope="module")
def contracts() -> list[SampleContract]:
    return sample_contracts(300, seed=5)


def test_the_same_count_and_seed_give_the_same_contracts() -> None:
    assert sample_contracts(8, seed=1) == sample_contracts(8, seed=1)


def test_another_seed_gives_other_contracts() -> None:
    first, second = sample_contracts(8, seed=1), sample_contracts(8, seed=2)
    assert all(a.text != b.text for a, b in zip(first, second, strict=True))


def test_a_longer_list_starts_with_the_shorter_one() -> None:
    assert sample_contracts(1000, seed=3)[:8] == sample_contracts(8, seed=3)


def test_no_two_contracts_are_alike() -> None:
    many = sample_contracts(1000)
    assert len({c.text for c in many}) == len({c.slug for c in many}) == 1000


def test_every_contract_is_three_to_five_pages(contracts: list[SampleContract]) -> None:
    for contract in contracts:
        assert 9000 <= len(contract.text) <= 15000, contract.slug
        assert 3 <= contract.pages <= 5


def test_every_contract_has_a_title_a_preamble_and_8_to_14_numbered_sections(
    contracts: list[SampleContract],
) -> None:
    for contract in contracts:
        assert contract.text.startswith(contract.title + "\n\n")
        assert '(the "Effective Date") by and between ' in contract.text
        numbers = [int(number) for number, _ in HEADING.findall(contract.text)]
        assert numbers == list(range(1, len(numbers) + 1)), contract.slug
        assert 8 <= len(numbers) <= 14, contract.slug


def test_expected_has_exactly_the_extraction_schema(contracts: list[SampleContract]) -> None:
    for contract in contracts:
        expected = contract.expected
        assert list(expected) == FIELDS
        assert len(expected["parties"]) >= 2
        assert all(set(party) == {"name", "role"} for party in expected["parties"])
        assert expected["contract_type"] == contract.title.lower()
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", expected["effective_date"])
        for money in (expected["total_value"], expected["liability_cap"]):
            assert set(money) == {"amount", "currency"}
            assert money["currency"] in {"USD", "EUR", "GBP"}
            assert money["amount"] > 0
        for count in ("term_months", "payment_terms_days", "termination_notice_days"):
            assert isinstance(expected[count], int)
        assert isinstance(expected["confidentiality_years"], int)
        assert isinstance(expected["auto_renewal"], bool)


def test_the_facts_are_written_in_the_text(contracts: list[SampleContract]) -> None:
    for contract in contracts:
        text, expected = contract.text, contract.expected
        for party in expected["parties"]:
            assert f"{party['name']}, " in text and f'("{party["role"]}")' in text
        assert f"laws of {expected['governing_law']}" in text.replace("laws of the ", "laws of ")
        assert f"{expected['total_value']['amount']:,}" in text
        assert f"{expected['liability_cap']['amount']:,}" in text
        assert f"({expected['termination_notice_days']}) days'" in text or (
            f" {expected['termination_notice_days']} days'" in text
        )


def test_contracts_vary_in_type_parties_amounts_and_terms(
    contracts: list[SampleContract],
) -> None:
    first = contracts[:8]
    assert len({c.title for c in first}) == 8, "the first eight are of eight different kinds"
    assert len({c.expected["parties"][0]["name"] for c in first}) == 8
    assert len({c.expected["total_value"]["amount"] for c in first}) >= 5
    assert {c.expected["total_value"]["currency"] for c in contracts} == {"USD", "EUR", "GBP"}
    assert {c.expected["auto_renewal"] for c in contracts} == {True, False}
    assert len({c.title for c in contracts}) >= 12
    assert len({c.expected["governing_law"] for c in contracts}) >= 8
    assert len({c.expected["effective_date"] for c in contracts}) >= 250
    for field in ("term_months", "payment_terms_days", "termination_notice_days"):
        assert len({c.expected[field] for c in contracts}) >= 5, field
    assert any(len(c.expected["parties"]) == 3 for c in contracts), "some have a guarantor"


def test_the_dummy_document_is_empty() -> None:
    dummy = dummy_document()
    assert (dummy.slug, dummy.text, dummy.expected, dummy.pages) == ("00-dummy-empty", "", {}, 0)


def test_write_samples_writes_one_text_file_per_contract(tmp_path: Path) -> None:
    paths = write_samples(tmp_path / "docs", count=3, seed=2, with_dummy=True)
    contracts = [dummy_document(), *sample_contracts(3, seed=2)]
    assert paths == [tmp_path / "docs" / f"{c.slug}.txt" for c in contracts]
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == sorted(p.name for p in paths)
    for path, contract in zip(paths, contracts, strict=True):
        assert path.read_text(encoding="utf-8") == contract.text


def test_sample_ndas_are_deterministic_and_number_their_clauses() -> None:
    from docpipe_dev.sample_ndas import sample_ndas

    first, second = sample_ndas(2), sample_ndas(3)[:2]
    assert first == second, "document i depends only on (seed, i)"
    for nda in first:
        headings = [line for line in nda.text.splitlines() if line[:1].isdigit()]
        assert headings[0] == "1. DEFINITION OF CONFIDENTIAL INFORMATION"
        assert len(headings) == 8
        assert set(nda.onerous) <= {h.split(". ", 1)[1] for h in headings}


def test_write_samples_writes_each_contract_in_each_format(tmp_path: Path) -> None:
    from docpipe.extraction import DocumentFormat, sniff_format

    paths = write_samples(tmp_path, count=1, formats=("text", "pdf", "docx", "scan"))
    slug = sample_contracts(1)[0].slug
    assert [p.name for p in paths] == [
        f"{slug}.txt",
        f"{slug}.pdf",
        f"{slug}.docx",
        f"{slug}.scan.pdf",
    ]
    assert [sniff_format(p.read_bytes()) for p in paths[1:]] == [
        DocumentFormat.PDF,
        DocumentFormat.DOCX,
        DocumentFormat.PDF,
    ]
    assert paths[3].stat().st_size < 1_000_000, "a scan fits the default upload limit"
