"""server/post_policy.py as a pure library: policy documents, conditions and sizes as S3 judges them."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from server import errors as s3
from server.post_policy import InvalidPolicyDocument, check_form, check_size, parse_policy

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
LATER = "2026-06-01T13:00:00.000Z"


def encode(document: Any) -> str:
    return base64.b64encode(json.dumps(document).encode()).decode()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("nope", "Invalid Policy: Invalid JSON."),
        ({"conditions": []}, "Invalid Policy: Policy missing expiration."),
        ({"expiration": LATER}, "Invalid Policy: Policy missing conditions."),
        ({"EXPIRATION": LATER, "conditions": []}, "Invalid Policy: Unexpected: 'expiration'"),
        (
            {"expiration": "2026-06-01 13:00:00 UTC", "conditions": []},
            "Invalid Policy: Invalid 'expiration' value: '2026-06-01 13:00:00 UTC'",
        ),
        (
            {"expiration": LATER, "conditions": {}},
            "Invalid Policy: Invalid 'conditions' value: must be a List.",
        ),
        (
            {"expiration": LATER, "conditions": [{}]},
            "Invalid Policy: Invalid Simple-Condition: Simple-Conditions must have exactly one property specified.",
        ),
        (
            {"expiration": LATER, "conditions": [{"Content-Length": 5}]},
            "Invalid Policy: Invalid Simple-Condition: value must be a string.",
        ),
        (
            {"expiration": LATER, "conditions": [[]]},
            "Invalid Policy: Invalid Condition: missing operation identifier.",
        ),
        (
            {"expiration": LATER, "conditions": [["in", "$a", "b"]]},
            "Invalid Policy: Invalid Condition: unknown operation 'in'.",
        ),
        (
            {"expiration": LATER, "conditions": [["content-length-range", 0]]},
            "Invalid Policy: Invalid content-length-range: wrong number of arguments.",
        ),
        (
            {"expiration": LATER, "conditions": [["content-length-range", 0, 512.0]]},
            "Invalid Policy: Invalid JSON.",
        ),
        (
            {"expiration": LATER, "conditions": ["key"]},
            "Invalid Policy: Invalid condition test: must be a List or Object.",
        ),
    ],
)
def test_bad_documents(document: Any, message: str) -> None:
    encoded = (
        encode(document) if not isinstance(document, str) else base64.b64encode(document.encode()).decode()
    )
    with pytest.raises(InvalidPolicyDocument) as caught:
        parse_policy(encoded)
    assert caught.value.detail == message


def test_conditions_match_names_case_insensitively_and_values_exactly() -> None:
    policy = parse_policy(encode({"expiration": LATER, "conditions": [
        {"bucket": "b"}, ["starts-with", "$key", "up/"], ["eq", "$content-type", "text/plain"],
        ["content-length-range", "5", 10]]}))  # fmt: skip
    check_form(policy, [("key", "up/x"), ("Content-Type", "text/plain")], "b", NOW)
    with pytest.raises(s3.AccessDenied) as caught:
        check_form(policy, [("key", "up/x"), ("Content-Type", "Text/Plain")], "b", NOW)
    assert caught.value.detail == (
        'Invalid according to Policy: Policy Condition failed: ["eq", "$content-type", "text/plain"]'
    )
    with pytest.raises(s3.AccessDenied) as caught:
        check_form(policy, [("key", "up/x"), ("Content-Type", "text/plain"), ("X-Extra", "1")], "b", NOW)
    assert caught.value.detail == "Invalid according to Policy: Extra input fields: X-Extra"
    check_form(policy, [("key", "up/x"), ("Content-Type", "text/plain"), ("x-ignore-me", "1"),
                        ("policy", "p"), ("x-amz-signature", "s")], "b", NOW)  # fmt: skip
    with pytest.raises(s3.AccessDenied) as caught:
        check_form(policy, [("key", "up/x"), ("Content-Type", "text/plain")], "b", NOW + timedelta(hours=1))
    assert caught.value.detail == "Invalid according to Policy: Policy expired."
    check_size(policy, 5)
    check_size(policy, 10)
    with pytest.raises(s3.EntityTooSmall):
        check_size(policy, 4)
    with pytest.raises(s3.EntityTooLarge):
        check_size(policy, 11)
