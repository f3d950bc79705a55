"""Every word the console shows has a Portuguese entry: each `t("...")` literal of the
templates, each message the console's modules hand to a problem page or a result
fragment, and each value a page shows as a word. A template change that adds a label
without its translation fails here, naming the labels that are missing."""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path

import pytest

from porteiro.model import EventStatus, Kind, PaymentState, Verdict
from porteiro.ui.labels import PORTUGUESE, labels

UI = Path(__file__).resolve().parents[2] / "src" / "porteiro" / "ui"
TEMPLATES = sorted((UI / "templates").glob("*.html"))
MODULES = sorted(UI.glob("*.py"))

# `t("...")` or `t('...')`; \b keeps `m.at(` and `format(` out.
_T_CALL = re.compile(r"""\bt\(\s*(?:"([^"]*)"|'([^']*)')""")
# The navigation's `("/ui/path", "Label")` pairs, shown through `t(label)`.
_NAV_ITEM = re.compile(r"""\(\s*"/ui/[^"]*"\s*,\s*"([^"]+)"\s*\)""")
# What the modules pass to problem.html / result.html / login.html, shown through t().
_MESSAGE = re.compile(
    r"""(?:\bmessage=|["']message["']\s*:\s*|\bproblem\(\s*request\s*,\s*\d+\s*,\s*"""
    r"""|\b_form\(\s*request\s*,\s*\d+\s*,\s*)(?:"([^"]*)"|'([^']*)')"""
)
ROLES = ("read", "operate")


def found(pattern: re.Pattern[str], files: Iterable[Path]) -> dict[str, set[str]]:
    """Each text `pattern` finds, with the files it is in."""
    where: dict[str, set[str]] = {}
    for path in files:
        for match in pattern.finditer(path.read_text(encoding="utf-8")):
            text = next(group for group in match.groups() if group is not None)
            where.setdefault(text, set()).add(path.name)
    return where


def missing(where: dict[str, set[str]]) -> str:
    """The texts with no Portuguese entry, one a line with where they are used."""
    return "\n".join(
        f"  {text!r} (in {', '.join(sorted(files))})"
        for text, files in sorted(where.items())
        if text not in PORTUGUESE
    )


def test_the_scan_finds_the_consoles_labels() -> None:
    # A regex that stopped matching would make every other test here pass vacuously.
    assert len(TEMPLATES) >= 10
    assert len(found(_T_CALL, TEMPLATES)) >= 100
    assert "Overview" in found(_NAV_ITEM, TEMPLATES)
    messages = found(_MESSAGE, MODULES)
    assert {"unknown payment", "requeued", "store unavailable", "unknown token"} <= set(messages)


def test_every_template_label_has_a_portuguese_entry() -> None:
    labelled = found(_T_CALL, TEMPLATES)
    for text, files in found(_NAV_ITEM, TEMPLATES).items():
        labelled.setdefault(text, set()).update(files)
    absent = missing(labelled)
    assert not absent, f"template labels with no entry in labels.PORTUGUESE:\n{absent}"


def test_every_console_message_has_a_portuguese_entry() -> None:
    absent = missing(found(_MESSAGE, MODULES))
    assert not absent, f"console messages with no entry in labels.PORTUGUESE:\n{absent}"


@pytest.mark.parametrize("enum", [PaymentState, EventStatus, Kind, Verdict])
def test_every_value_shown_as_a_word_has_a_portuguese_entry(enum: type[StrEnum]) -> None:
    absent = missing({member.value: {enum.__name__} for member in enum})
    assert not absent, f"{enum.__name__} values with no entry in labels.PORTUGUESE:\n{absent}"


def test_every_role_has_a_portuguese_entry() -> None:
    absent = missing({role: {"roles"} for role in ROLES})
    assert not absent, f"roles with no entry in labels.PORTUGUESE:\n{absent}"


def test_no_portuguese_entry_is_blank() -> None:
    blank = sorted(key for key, value in PORTUGUESE.items() if not value.strip())
    assert not blank, f"blank Portuguese entries: {blank}"


def test_portuguese_translates_and_passes_unknown_text_through() -> None:
    t = labels("pt")
    assert t("Payments") == "Pagamentos"
    assert t("paid") == "pago"
    assert t("not a label anywhere") == "not a label anywhere"


@pytest.mark.parametrize("text", ["Payments", "paid", "Log in", "not a label anywhere", ""])
def test_english_is_the_text_as_written(text: str) -> None:
    assert labels("en")(text) == text
