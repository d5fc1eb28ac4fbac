"""util.jsonfast and util.names.valid_text: documents with names that are not UTF-8."""

from __future__ import annotations

import json

import pytest

from neuron_explorer.util import jsonfast
from neuron_explorer.util.names import valid_text, valid_texts

ARG = "data/caf\udce9.csv"  # the argument b"data/caf\xe9.csv" as Python decodes it


@pytest.mark.parametrize("text, want", [
    ("plain", "plain"), ("é 日本", "é 日本"), (ARG, "data/caf\\xe9.csv"),
    ("\ud800x", "\\xed\\xa0\\x80x"),  # a lone surrogate that no byte decodes to: its 3 bytes
])
def test_valid_text_escapes_only_what_utf8_cannot_hold(text, want):
    assert valid_text(text) == want
    valid_text(text).encode()


def test_valid_texts_walks_keys_values_and_lists():
    got = valid_texts({ARG: [ARG, 1, 2.5, None, (ARG,)], "k": {"n": ARG}})
    assert got == {"data/caf\\xe9.csv": ["data/caf\\xe9.csv", 1, 2.5, None, ["data/caf\\xe9.csv"]],
                   "k": {"n": "data/caf\\xe9.csv"}}


def test_a_document_with_an_undecodable_name_is_written_escaped():
    assert jsonfast.BACKEND == "orjson"  # (the monitor extra, a dependency of the test environment)
    doc = {"tag": ARG, "n": 3, "names": ["é", ARG]}
    got = json.loads(jsonfast.dumps_bytes(doc))
    assert got == {"tag": "data/caf\\xe9.csv", "n": 3, "names": ["é", "data/caf\\xe9.csv"]}
    assert json.loads(jsonfast.dumps_line(doc)) == got
    assert jsonfast.dumps_bytes({"a": "é"}) == b'{"a":"\xc3\xa9"}'  # a valid document: orjson's bytes as before


def test_the_standard_library_path_is_unchanged_and_never_fails(monkeypatch):
    monkeypatch.setattr(jsonfast, "_orjson", None)
    doc = {"tag": ARG, "a": "é"}
    assert jsonfast.dumps_bytes(doc) == json.dumps(doc, separators=(",", ":")).encode()  # \\u escapes, ASCII
    assert jsonfast.dumps_line(doc) == json.dumps(doc, separators=(",", ":"))


@pytest.mark.parametrize("backend", ["orjson", "json"])
def test_other_encoding_errors_still_raise(monkeypatch, backend):
    if backend == "json":
        monkeypatch.setattr(jsonfast, "_orjson", None)
    with pytest.raises(TypeError):
        jsonfast.dumps_bytes({"x": object()})
