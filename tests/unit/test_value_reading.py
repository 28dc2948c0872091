"""Whether a value can be read in its quote: numbers, amounts, dates and names however a
contract writes them, and the rule for booleans, enums, objects and lists."""

import re

import pytest

from docpipe.pipelines.value_reading import value_in_quote
from docpipe_dev.samples import sample_contracts
from docpipe_fake_llm.fields import read_quoted_fields


@pytest.mark.parametrize(
    ("value", "quote"),
    [
        (250000, "Liability is limited to \u201cUSD 250,000\u201d in the aggregate"),
        (1250000.5, "a total of EUR 1.250.000,50"),
        (1250000, "CHF 1\u00a0250\u00a0000"),
        (1250000, "1'250'000 francs"),
        (1500000, "up to $1.5 million"),
        (250000, "a cap of 250k"),
        (0.05, "interest at 5 % a year"),
        (24, "shall remain in force for twenty-four (24) months"),
        (24, "an initial term of two (2) years"),
        (14, "within two weeks"),
        (120, "one hundred and twenty days"),
        (30, "payable net 30"),
        ("2025-05-07", '7th day of May, 2025 (the "Effective Date")'),
        ("2025-03-07", "dated March 7, 2025"),
        ("2025-03-07", "dated 7 Mar. 2025"),
        ("2025-03-07", "signed on 07/03/2025"),
        ("2025-03-07", "signed on 3/7/2025"),
        ("2025-03-07", "as of 2025-03-07"),
        ("USD", "a fee of $120,000"),
        ("EUR", "120 000 euros"),
        ("GBP", "GBP 5,000"),
        ("Acme Ltd.", "between ACME LIMITED, a company"),
        ("Borealis SAS", "and Borealis SAS (\u201cCustomer\u201d)"),
        ("master services agreement", "MASTER SERVICES AGREEMENT"),
        ("fixed_price", "on a fixed price basis"),
        ("England and Wales", "governed by the laws of England and Wales."),
        (True, "This Agreement renews automatically."),
        (False, "This Agreement renews automatically."),
        (None, "anything"),
        ([], "anything"),
        ({"amount": 120000, "currency": "USD"}, "a total of US$120,000"),
        ([{"name": "Acme Ltd", "role": "Supplier"}], 'Acme Ltd ("Supplier")'),
    ],
)
def test_a_value_the_quote_states_is_read_in_it(value: object, quote: str) -> None:
    assert value_in_quote(value, quote)


@pytest.mark.parametrize(
    ("value", "quote"),
    [
        ({"name": "7.", "role": "Supplier"}, "7."),
        ("Acme Ltd", "7."),
        (30, "within 130 days"),
        (31, "within 30 days"),
        (24, "for twenty (20) months"),
        (250000, "USD 25,000"),
        ("2025-03-08", "dated March 7, 2025"),
        ("2025-03-07", "dated March 7, 2024"),
        ("EUR", "a fee of $120,000"),
        ("Acme", "Acmeco Ltd"),
        ("$", "a fee of $5"),
        ({"amount": 120000, "currency": "EUR"}, "a total of US$120,000"),
        ([{"name": "Acme Ltd", "role": "Customer"}], 'Acme Ltd ("Supplier")'),
        (60, "thirty and six days"),
    ],
)
def test_a_value_the_quote_does_not_state_is_not_read_in_it(value: object, quote: str) -> None:
    assert not value_in_quote(value, quote)


def test_every_value_the_fake_provider_reads_from_the_sample_contracts_is_in_its_quote() -> None:
    """The sample contracts write their facts every way the generator knows (numbers in
    words and digits, dates, currencies, durations in years): each value read with its
    quote, as a model answers, is supported."""
    checked = 0
    for contract in sample_contracts(60):
        for section in re.split(r"\n(?=\d+\.\s+[A-Z])", contract.text):
            for name, read in read_quoted_fields(section).items():
                assert value_in_quote(read["value"], read["quote"]), (name, read)
                checked += 1
    assert checked > 500
