"""The policy of a browser POST upload: its signature, its document and its conditions.

Pure functions, no I/O. A form carries a base64 JSON policy (`expiration`, `conditions`) and a
signature of that base64 text — SigV4 (`x-amz-algorithm`, `x-amz-credential`, `x-amz-date`,
`x-amz-signature`) or SigV2 (`AWSAccessKeyId`, `signature`). The order of the checks and the
errors are S3's: required fields (InvalidArgument), the signature over the policy as sent
(SignatureDoesNotMatch), the document (InvalidPolicyDocument), then expiry, each condition and
fields no condition covers (AccessDenied "Invalid according to Policy: ..."), and after the
file, its size against content-length-range (EntityTooLarge / EntityTooSmall).

Field names match case-insensitively, values case-sensitively; `$bucket` is the bucket of the URL.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime

from server import errors as s3
from server.signature.dates import parse_amz_date
from server.signature.keys import hmac_sha256_hex, same, signing_key
from server.signature.request import Credentials
from server.signature.sigv4 import ALGORITHM, parse_credential, secret_of

# Fields no condition needs to cover (AWS: "except x-amz-signature, file, policy, and field
# names that have an x-ignore- prefix"), with SigV2's signature.
EXEMPT_FIELDS = {"x-amz-signature", "file", "policy", "signature"}


class InvalidPolicyDocument(s3.S3Error):
    status = 400
    message = "The content of the form does not meet the conditions specified in the policy document."


@dataclass(frozen=True)
class Condition:
    operation: str  # "eq" or "starts-with" (lower case)
    field: str  # as written, with its "$"
    value: str
    text: str  # the condition as S3 prints it in an error: ["eq", "$key", "a"]

    @property
    def name(self) -> str | None:
        """The form field it tests, lower case; None when the policy forgot the "$" (never holds)."""
        return self.field[1:].lower() if self.field.startswith("$") else None


@dataclass(frozen=True)
class LengthRange:
    low: int | None  # None when a bound is not a number: the condition then never holds
    high: int | None
    text: str


@dataclass(frozen=True)
class PostPolicy:
    expiration: datetime
    conditions: list[Condition]
    length_ranges: list[LengthRange]


def _invalid(detail: str) -> InvalidPolicyDocument:
    return InvalidPolicyDocument(f"Invalid Policy: {detail}")


def _argument_missing(name: str) -> s3.InvalidArgument:
    return s3.InvalidArgument(
        f"Bucket POST must contain a field named '{name}'.  If it is specified, please check the order of the fields.",
        ArgumentName=name,
        ArgumentValue="",
    )


# --- who signed -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PostSigner:
    access_key: str


def _mismatch(access_key: str, policy: str, provided: str) -> s3.SignatureDoesNotMatch:
    return s3.SignatureDoesNotMatch(
        AWSAccessKeyId=access_key,
        StringToSign=policy,
        SignatureProvided=provided,
        StringToSignBytes=" ".join(f"{byte:02x}" for byte in policy.encode("utf-8", "surrogateescape")),
    )


def verify_signature(fields: dict[str, str], creds: Credentials) -> PostSigner | None:
    """The signer of the form's policy; None for an anonymous form (no signature fields at all).

    `fields` has lower-case names. Raises InvalidArgument for a missing or malformed field,
    InvalidAccessKeyId, SignatureDoesNotMatch.
    """
    if "awsaccesskeyid" in fields or "signature" in fields:
        return _verify_v2(fields, creds)
    sigv4 = ("x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature")
    if not any(name in fields for name in sigv4):
        return None
    for name, shown in zip(
        sigv4, ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Signature"), strict=True
    ):
        if name not in fields:
            raise _argument_missing(shown)
    if "policy" not in fields:
        raise _argument_missing("Policy")
    if fields["x-amz-algorithm"] != ALGORITHM:
        raise s3.InvalidArgument(
            f'X-Amz-Algorithm only supports "{ALGORITHM}"',
            ArgumentName="X-Amz-Algorithm",
            ArgumentValue=fields["x-amz-algorithm"],
        )
    scope = parse_credential(fields["x-amz-credential"], s3.InvalidArgument, region=None, service="s3")
    if parse_amz_date(fields["x-amz-date"]) is None:
        raise s3.InvalidArgument(
            "X-Amz-Date must be formated via ISO8601 Long format",  # sic, as S3
            ArgumentName="X-Amz-Date",
            ArgumentValue=fields["x-amz-date"],
        )
    secret = secret_of(creds, scope.access_key)
    policy = fields["policy"]
    expected = hmac_sha256_hex(signing_key(secret, scope.date, scope.region, scope.service), policy)
    if not same(expected, fields["x-amz-signature"].strip().lower()):
        raise _mismatch(scope.access_key, policy, fields["x-amz-signature"])
    return PostSigner(scope.access_key)


def _verify_v2(fields: dict[str, str], creds: Credentials) -> PostSigner:
    for name, shown in (
        ("awsaccesskeyid", "AWSAccessKeyId"),
        ("signature", "Signature"),
        ("policy", "Policy"),
    ):
        if name not in fields:
            raise _argument_missing(shown)
    access_key = fields["awsaccesskeyid"]
    secret = secret_of(creds, access_key)
    policy = fields["policy"]
    digest = hmac.new(
        secret.encode("utf-8"), policy.encode("utf-8", "surrogateescape"), hashlib.sha1
    ).digest()
    if not same(base64.b64encode(digest).decode(), fields["signature"]):
        raise _mismatch(access_key, policy, fields["signature"])
    return PostSigner(access_key)


# --- the document ---------------------------------------------------------------------------------


def _no_floats(text: str) -> object:
    raise _invalid("Invalid JSON.")  # S3 refuses 512.0 where it wants 512


def _expiration(value: object) -> datetime:
    if isinstance(value, str):
        for form in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
            try:
                return datetime.strptime(value, form).replace(tzinfo=UTC)
            except ValueError:
                continue
    raise _invalid(f"Invalid 'expiration' value: '{value}'")


def _show(items: list[object]) -> str:
    return json.dumps(items, ensure_ascii=False)


def _bound(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if value < 0:
            raise _invalid("Invalid content-length-range: the bounds must not be negative.")
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def parse_policy(encoded: str) -> PostPolicy:
    """The policy field (base64 JSON) as a PostPolicy. Raises InvalidPolicyDocument."""
    try:
        raw = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise _invalid("invalid Base64 encoding.") from None
    try:
        document = json.loads(raw, parse_float=_no_floats)
    except (ValueError, RecursionError):
        raise _invalid("Invalid JSON.") from None
    if not isinstance(document, dict):
        raise _invalid("Invalid JSON.")
    for name in document:
        if name not in ("expiration", "conditions"):
            raise _invalid(f"Unexpected: '{name.lower()}'")
    if "expiration" not in document:
        raise _invalid("Policy missing expiration.")
    if "conditions" not in document:
        raise _invalid("Policy missing conditions.")
    expiration = _expiration(document["expiration"])
    if not isinstance(document["conditions"], list):
        raise _invalid("Invalid 'conditions' value: must be a List.")
    conditions: list[Condition] = []
    ranges: list[LengthRange] = []
    for item in document["conditions"]:
        if isinstance(item, dict):
            if len(item) != 1:
                raise _invalid(
                    "Invalid Simple-Condition: Simple-Conditions must have exactly one property specified."
                )
            ((name, value),) = item.items()
            if value is None:
                raise _invalid("Invalid JSON.")
            if not isinstance(value, str):
                raise _invalid("Invalid Simple-Condition: value must be a string.")
            conditions.append(Condition("eq", "$" + name, value, _show(["eq", "$" + name, value])))
        elif isinstance(item, list):
            if not item or not isinstance(item[0], str):
                raise _invalid("Invalid Condition: missing operation identifier.")
            operation = item[0].lower()
            if operation not in ("eq", "starts-with", "content-length-range"):
                raise _invalid(f"Invalid Condition: unknown operation '{item[0]}'.")
            if len(item) != 3:
                raise _invalid(f"Invalid {item[0]}: wrong number of arguments.")
            if operation == "content-length-range":
                ranges.append(LengthRange(_bound(item[1]), _bound(item[2]), _show(item)))
                continue
            if not isinstance(item[1], str) or not isinstance(item[2], str):
                raise _invalid("Invalid JSON.")
            conditions.append(Condition(operation, item[1], item[2], _show(item)))
        else:
            raise _invalid("Invalid condition test: must be a List or Object.")
    return PostPolicy(expiration, conditions, ranges)


# --- the checks -----------------------------------------------------------------------------------


def _refused(detail: str) -> s3.AccessDenied:
    return s3.AccessDenied(f"Invalid according to Policy: {detail}")


def check_form(policy: PostPolicy, fields: list[tuple[str, str]], bucket: str, now: datetime) -> None:
    """Expiry, every eq / starts-with condition, then fields no condition covers (AccessDenied)."""
    if now >= policy.expiration:
        raise _refused("Policy expired.")
    values: dict[str, str] = {}
    for name, value in fields:
        values.setdefault(name.lower(), value)
    values["bucket"] = bucket
    for condition in policy.conditions:
        actual = values.get(condition.name) if condition.name is not None else None
        if actual is None:
            raise _refused(f"Policy Condition failed: {condition.text}")
        holds = (
            actual == condition.value if condition.operation == "eq" else actual.startswith(condition.value)
        )
        if not holds:
            raise _refused(f"Policy Condition failed: {condition.text}")
    for bounds in policy.length_ranges:
        if bounds.low is None or bounds.high is None:
            raise _refused(f"Policy Condition failed: {bounds.text}")
    covered = {condition.name for condition in policy.conditions}
    for field_name, _ in fields:
        lower = field_name.lower()
        if lower in EXEMPT_FIELDS or lower.startswith("x-ignore-") or lower in covered:
            continue
        if lower == "awsaccesskeyid":  # SigV2's key: covered by the signature itself
            continue
        raise _refused(f"Extra input fields: {field_name}")


def size_limit(policy: PostPolicy) -> int | None:
    """The largest file any content-length-range allows (None: no range)."""
    highs = [bounds.high for bounds in policy.length_ranges if bounds.high is not None]
    return min(highs) if highs else None


def check_size(policy: PostPolicy, size: int) -> None:
    for bounds in policy.length_ranges:
        assert bounds.low is not None and bounds.high is not None  # check_form refused the others
        if size > bounds.high:
            raise s3.EntityTooLarge(
                "Your proposed upload exceeds the maximum allowed size",
                ProposedSize=size,
                MaxSizeAllowed=bounds.high,
            )
        if size < bounds.low:
            raise s3.EntityTooSmall(
                "Your proposed upload is smaller than the minimum allowed size",
                ProposedSize=size,
                MinSizeAllowed=bounds.low,
            )
