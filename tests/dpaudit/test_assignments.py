"""dpaudit/assignments.py: the one KEY=VALUE parser and its one set of boolean words."""

from __future__ import annotations

import pytest

from dpaudit.assignments import BOOLEAN_WORDS, parse_boolean, parse_literal, split_assignment
from dpaudit.errors import ConfigurationError


def test_an_assignment_splits_into_scope_key_and_value():
    assert split_assignment(" max-pairs = 400 ", "--set") == (None, "max_pairs", "400")
    assert split_assignment("gcon.encoder-epochs=5", "--set", scoped=True) == ("gcon", "encoder_epochs", "5")
    assert split_assignment("a.b=1", "--set") == (None, "a.b", "1")  # unscoped: the dot is the key's
    assert split_assignment("x=a=b", "--set") == (None, "x", "a=b")


@pytest.mark.parametrize("bad", ["epochs", "=3", " =3"])
def test_an_assignment_without_key_or_equals_is_refused_naming_the_option(bad):
    with pytest.raises(ConfigurationError, match=r"--design expects KEY=VALUE"):
        split_assignment(bad, "--design")
    with pytest.raises(ConfigurationError, match=r"--set expects \[NAME\.\]KEY=VALUE"):
        split_assignment(bad, "--set", scoped=True)


def test_one_set_of_boolean_words_for_typed_and_untyped_values():
    for word, value in BOOLEAN_WORDS.items():
        assert parse_boolean(word.upper()) is value and parse_literal(word) is value
    assert parse_boolean("1") is True and parse_boolean("0") is False
    assert parse_literal("1") == 1 and parse_literal("1") is not True  # untyped: a number
    with pytest.raises(ValueError):
        parse_boolean("maybe")


def test_untyped_values_read_numbers_none_json_and_strings():
    assert parse_literal("0.5") == 0.5 and parse_literal("1e3") == 1000.0
    assert parse_literal("null") is None and parse_literal("None") is None
    assert parse_literal("[1, 2]") == [1, 2] and parse_literal('"tsne"') == "tsne"
    assert parse_literal("tsne,umap") == "tsne,umap"
