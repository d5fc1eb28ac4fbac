"""The s3:// URL and endpoint parsers, fuzzed: any string either names a location (whose parts
round-trip) or is refused with a StorageError / ConfigError naming it; nothing else escapes."""

from __future__ import annotations

import random

import pytest

from neuron_explorer.contracts.env import ConfigError, s3_endpoint
from neuron_explorer.util.storage import StorageError, is_url, parse

ALPHABET = "s3:/abc.-_AZ09 \x00\n%..//é"


@pytest.mark.parametrize("url,bucket,prefix", [
    ("s3://caps", "caps", ""), ("s3://caps/", "caps", ""), ("s3://caps/a/b/", "caps", "a/b"),
    ("s3://my.bucket-1/x y/z", "my.bucket-1", "x y/z")])
def test_good_urls(url, bucket, prefix):
    loc = parse(url)
    assert (loc.bucket, loc.prefix) == (bucket, prefix)
    assert parse(loc.url) == loc and loc.child("k/v").prefix == (f"{prefix}/k/v" if prefix else "k/v")


@pytest.mark.parametrize("url,words", [
    ("s3://", "not a valid bucket name"), ("s3://Caps/x", "not a valid bucket name"),
    ("s3://ab/x", "not a valid bucket name"), ("s3://caps/a//x", "empty"), ("s3://caps/a/../b", "'..'"),
    ("s3://caps/a/\x00", "component"), ("/local/dir", "not an s3:// URL")])
def test_bad_urls_name_the_problem(url, words):
    with pytest.raises(StorageError) as e:
        parse(url)
    assert words in str(e.value) and "\n" not in str(e.value).strip()


def test_fuzz_url_parser():
    rng = random.Random(19)
    for _ in range(20000):
        s = "s3://" * rng.randint(0, 1) + "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 30)))
        try:
            loc = parse(s)
        except StorageError as e:
            assert "\n" not in str(e) and "\x00" not in str(e)
            continue
        assert is_url(s) and loc.bucket and ".." not in loc.prefix.split("/") and parse(loc.url) == loc


def test_endpoint_resolution_and_fuzz():
    assert s3_endpoint(None, {}) is None
    assert s3_endpoint(None, {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000/"}) == "http://127.0.0.1:9000"
    assert s3_endpoint(None, {"AWS_ENDPOINT_URL": "http://a", "AWS_ENDPOINT_URL_S3": "https://b"}) == "https://b"
    assert s3_endpoint("http://c:1", {"AWS_ENDPOINT_URL_S3": "https://b"}) == "http://c:1"
    rng = random.Random(7)
    for _ in range(5000):
        v = "".join(rng.choice("htps:/.1 \x00é") for _ in range(rng.randint(1, 20)))
        try:
            got = s3_endpoint(v, {})
        except ConfigError as e:
            assert "--endpoint-url" in str(e)
            continue
        assert got.startswith(("http://", "https://")) and not any(c.isspace() for c in got)
