"""A request's model version read as Triton reads it (``std::stol``), for HTTP and gRPC alike."""

from __future__ import annotations

import pytest
from naiad.codecs.version import model_version
from naiad.core.errors import InvalidArgumentError


@pytest.mark.parametrize(
    ("text", "version"), [("", ""), ("1", "1"), ("01", "1"), ("00", "0"), (" 2", "2"), ("+3", "3"), ("4x", "4")]
)
def test_versions_read_like_triton(text: str, version: str) -> None:
    assert model_version(text) == version


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "99999999999999999999",
            "failed to get model version from specified version string '99999999999999999999' (details: stol), "
            "version should be an integral value > 0",
        ),
        ("x", "failed to get model version from specified version string 'x' (details: stol), version should be "
         "an integral value > 0"),
        ("-1", "invalid model version specified '-1' , version should be an integral value > 0"),
    ],
)
def test_versions_triton_refuses_are_refused_in_its_words(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        model_version(text)
    assert refused.value.message == message
