"""util.names: names read from files made into path components and one-line messages.
(Uniqueness and bounds on a fixed list: tests/view/test_output_safety.py.)"""

from __future__ import annotations

import random
import re
from urllib.parse import unquote

import pytest

from neuron_explorer.util.names import printable, safe_component

ESCAPE = re.compile(r"%(?![0-9A-F]{2})")  # a % not followed by two hex digits


@pytest.mark.parametrize("name,encoded", [
    ("i-0abc.host_1", "i-0abc.host_1"), ("a/b", "a%2Fb"), ("50%", "50%25"), (".", "%2E"), ("..", "%2E%2E"),
    ("...", "..."), ("a b", "a%20b"), ("é", "%C3%A9"), ("\x00", "%00"), ("\udcff", "%FF"), ("~", "%7E"),
])
def test_each_byte_outside_the_safe_set_is_percent_encoded(name, encoded):
    assert safe_component(name) == encoded


def test_encoding_decodes_back_as_hive_readers_decode_it():
    rng = random.Random(11)
    alphabet = "ab.-_/%~ \t\x00é日\udc80\udcff"
    for _ in range(2000):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        enc = safe_component(name)
        assert len(enc) <= 200 and not ESCAPE.search(enc) and enc not in (".", "..") and "/" not in enc
        if name not in (".", ".."):
            assert unquote(enc, errors="surrogateescape") == name


def test_a_name_past_200_bytes_keeps_a_prefix_and_a_hash_of_the_whole():
    whole = "x" * 200
    assert safe_component(whole) == whole  # exactly at the bound: kept whole
    a, b = safe_component("x" * 201), safe_component("x" * 200 + "y")
    assert a != b and len(a) == len(b) == 180 + 1 + 16
    assert a.startswith("x" * 180 + "~") and re.fullmatch(r"[0-9a-f]{16}", a[-16:])


def test_a_cut_never_splits_an_escape():
    for pad in range(4):  # shift where byte 180 falls inside the %XX escapes
        enc = safe_component("a" * pad + "/" * 100)
        prefix = enc.split("~")[0]
        assert not ESCAPE.search(prefix) and len(prefix) <= 180


def test_an_empty_name_is_refused():
    with pytest.raises(ValueError):
        safe_component("")


@pytest.mark.parametrize("text,shown", [
    ("plain text é 日", "plain text é 日"), ("a\nb\tc", "a\\x0ab\\x09c"), ("\x7f", "\\x7f"),
    ("name\udcff", "name\\xff"), ("\u200b", "\\u200b"), ("\U000e0001", "\\U000e0001"), ("", ""),
])
def test_printable_escapes_control_characters_and_undecodable_bytes(text, shown):
    assert printable(text) == shown
    assert printable(text).isprintable()
