"""Unit tests of the identifier-aware tokenizer used by BM25, query building and the simulator."""

from __future__ import annotations

from shared.index.tokens import tokenize


def test_dotted_camel_case_gives_each_identifier_whole_then_its_parts() -> None:
    assert tokenize("UserService.findById") == [
        "userservice",
        "user",
        "service",
        "findbyid",
        "find",
        "by",
        "id",
    ]


def test_snake_case_identifier_is_kept_whole_and_split_on_underscores() -> None:
    assert tokenize("order_service_total") == ["order_service_total", "order", "service", "total"]


def test_acronym_run_is_split_before_the_next_capitalised_word() -> None:
    assert tokenize("HTTPServerError") == ["httpservererror", "http", "server", "error"]
    assert tokenize("getHTTPResponse") == ["gethttpresponse", "get", "http", "response"]


def test_hangul_words_are_kept_as_tokens() -> None:
    assert tokenize("사용자 서비스") == ["사용자", "서비스"]


def test_single_hangul_syllable_is_kept_although_single_ascii_letters_are_dropped() -> None:
    assert tokenize("값 x") == ["값"]


def test_single_ascii_letters_and_digits_are_dropped_as_noise() -> None:
    assert tokenize("a = b + 1; i, j") == []


def test_empty_text_has_no_tokens() -> None:
    assert tokenize("") == []
    assert tokenize("  ...()  ") == []


def test_numbers_of_two_or_more_digits_are_tokens() -> None:
    assert tokenize("HTTP 404 at line 42") == ["http", "404", "at", "line", "42"]


def test_digits_split_from_letters_inside_an_identifier() -> None:
    # The whole identifier is searchable, and so is its word part; a lone digit is noise.
    assert tokenize("http2Server") == ["http2server", "http", "server"]


def test_tokens_are_lower_case_so_a_lower_case_query_matches_the_whole_identifier() -> None:
    code = tokenize("NullPointerException")
    assert code == ["nullpointerexception", "null", "pointer", "exception"]
    assert tokenize("nullpointerexception")[0] in code
