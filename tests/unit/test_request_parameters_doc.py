"""docs/request-parameters.md lists every parameter of POST /v1/responses, and says what Troupe
does with it: a parameter the SDK gains fails here until the table (and the code) answer it."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from openai.types.responses import response_create_params as create_params

from troupe.protocol.request import UNSUPPORTED_PARAMETERS, CreateResponseRequest

TABLE = Path(__file__).resolve().parents[2] / "docs" / "request-parameters.md"
ROW = re.compile(r"^\| `(\w+)` \| (.+) \|$", re.MULTILINE)


def _rows() -> dict[str, str]:
    return dict(ROW.findall(TABLE.read_text()))


def _sdk_parameters() -> set[str]:
    names: set[str] = set()
    for params in (create_params.ResponseCreateParamsStreaming, create_params.ResponseCreateParamsNonStreaming):
        names |= set(typing.get_type_hints(params))
    return names


def test_the_table_lists_every_sdk_parameter_and_troupes_own() -> None:
    rows, sdk = _rows(), _sdk_parameters()
    assert len(sdk) > 30, "the SDK's parameters were read"
    missing = sdk - rows.keys()
    assert not missing, f"docs/request-parameters.md does not say what Troupe does with {sorted(missing)}"
    assert set(rows) == set(CreateResponseRequest.model_fields), "the table lists what the request model takes"
    assert all(len(text) > 20 for text in rows.values()), "each row says something"


def test_each_refused_parameter_says_so() -> None:
    rows = _rows()
    for name in UNSUPPORTED_PARAMETERS:
        assert "400 `unsupported_parameter`" in rows[name], name
