"""IAM Condition operators: parse-time checks and evaluation against a request's context.

A Condition block is {operator: {key: value or [values]}}. Every operator must hold, and within
one operator every key (AND); a key holds when any of its values matches (OR). Suffix
`IfExists` makes a key missing from the request true; `ForAnyValue:` / `ForAllValues:` compare
multi-valued keys as sets. A key missing from the request fails a positive operator and passes a
negated one (StringNotEquals, NotIpAddress, ...), as AWS documents.

The request side is a `Context`: key → list of values, or None when the request has no such key.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Protocol


class ConditionError(ValueError):
    """A Condition block a policy may not hold (the message is S3's MalformedPolicy reason)."""


class Context(Protocol):
    def get(self, key: str) -> list[str] | None: ...


@lru_cache(maxsize=4096)
def wildcard(pattern: str, ignore_case: bool = False) -> re.Pattern[str]:
    """`*` any run of characters, `?` any one character; the rest literal (IAM's *Like)."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(body, re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def _parse_date(text: str) -> float:
    text = text.strip()
    if re.fullmatch(r"-?\d+(\.\d+)?", text):
        return float(text)  # epoch seconds are allowed too
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(text) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@lru_cache(maxsize=1024)
def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(text.strip(), strict=False)


def _numbers(text: str) -> float:
    return float(text)


# name → (compare(request value, policy value) -> bool, negated, value checker for parse time)
Compare = Callable[[str, str], bool]


def _string(a: str, b: str) -> bool:
    return a == b


def _string_ci(a: str, b: str) -> bool:
    return a.lower() == b.lower()


def _like(a: str, b: str) -> bool:
    return wildcard(b).fullmatch(a) is not None


def _numeric(op: Callable[[float, float], bool]) -> Compare:
    def compare(a: str, b: str) -> bool:
        try:
            return op(float(a), float(b))
        except ValueError:
            return False

    return compare


def _date(op: Callable[[float, float], bool]) -> Compare:
    def compare(a: str, b: str) -> bool:
        try:
            return op(_parse_date(a), _parse_date(b))
        except ValueError:
            return False

    return compare


@lru_cache(maxsize=4096)
def _ip(a: str, b: str) -> bool:
    try:
        address = ipaddress.ip_address(a)
        network = _network(b)
    except ValueError:
        return False
    return address.version == network.version and address in network


def _bool(a: str, b: str) -> bool:
    return a.lower() == b.lower()


def _eq(x: float, y: float) -> bool:
    return x == y


def _lt(x: float, y: float) -> bool:
    return x < y


def _le(x: float, y: float) -> bool:
    return x <= y


def _gt(x: float, y: float) -> bool:
    return x > y


def _ge(x: float, y: float) -> bool:
    return x >= y


def _check_nothing(value: str) -> None:
    return None


def _check_number(value: str) -> None:
    float(value)


def _check_date(value: str) -> None:
    _parse_date(value)


def _check_ip(value: str) -> None:
    _network(value)


def _check_bool(value: str) -> None:
    if value.lower() not in ("true", "false"):
        raise ValueError(value)


OPERATORS: dict[str, tuple[Compare, bool, Callable[[str], None]]] = {
    "StringEquals": (_string, False, _check_nothing),
    "StringNotEquals": (_string, True, _check_nothing),
    "StringEqualsIgnoreCase": (_string_ci, False, _check_nothing),
    "StringNotEqualsIgnoreCase": (_string_ci, True, _check_nothing),
    "StringLike": (_like, False, _check_nothing),
    "StringNotLike": (_like, True, _check_nothing),
    "NumericEquals": (_numeric(_eq), False, _check_number),
    "NumericNotEquals": (_numeric(_eq), True, _check_number),
    "NumericLessThan": (_numeric(_lt), False, _check_number),
    "NumericLessThanEquals": (_numeric(_le), False, _check_number),
    "NumericGreaterThan": (_numeric(_gt), False, _check_number),
    "NumericGreaterThanEquals": (_numeric(_ge), False, _check_number),
    "DateEquals": (_date(_eq), False, _check_date),
    "DateNotEquals": (_date(_eq), True, _check_date),
    "DateLessThan": (_date(_lt), False, _check_date),
    "DateLessThanEquals": (_date(_le), False, _check_date),
    "DateGreaterThan": (_date(_gt), False, _check_date),
    "DateGreaterThanEquals": (_date(_ge), False, _check_date),
    "Bool": (_bool, False, _check_bool),
    "BinaryEquals": (_string, False, _check_nothing),
    "IpAddress": (_ip, False, _check_ip),
    "NotIpAddress": (_ip, True, _check_ip),
    "ArnEquals": (_like, False, _check_nothing),
    "ArnLike": (_like, False, _check_nothing),
    "ArnNotEquals": (_like, True, _check_nothing),
    "ArnNotLike": (_like, True, _check_nothing),
}

# The condition keys S3 understands (a policy naming another is refused). Prefix keys end in "/".
GLOBAL_KEYS = frozenset({
    "aws:sourceip", "aws:securetransport", "aws:currenttime", "aws:epochtime", "aws:username",
    "aws:userid", "aws:principaltype", "aws:principalarn", "aws:principalaccount", "aws:referer",
    "aws:useragent", "aws:sourcevpc", "aws:sourcevpce", "aws:principalorgid", "aws:requestedregion",
})  # fmt: skip
S3_KEYS = frozenset({
    "s3:prefix", "s3:delimiter", "s3:max-keys", "s3:x-amz-server-side-encryption",
    "s3:x-amz-server-side-encryption-aws-kms-key-id", "s3:x-amz-acl", "s3:x-amz-content-sha256",
    "s3:x-amz-copy-source", "s3:x-amz-metadata-directive", "s3:x-amz-storage-class",
    "s3:signatureversion", "s3:authtype", "s3:signatureage", "s3:requestobjecttagkeys", "s3:versionid",
    "s3:x-amz-grant-read", "s3:x-amz-grant-write", "s3:x-amz-grant-read-acp", "s3:x-amz-grant-write-acp",
    "s3:x-amz-grant-full-control", "s3:tlsversion", "s3:resourceaccount", "s3:object-lock-mode",
    "s3:locationconstraint", "s3:x-amz-object-ownership",
})  # fmt: skip
PREFIX_KEYS = (
    "s3:existingobjecttag/",
    "s3:requestobjecttag/",
    "aws:principaltag/",
    "aws:requesttag/",
    "aws:resourcetag/",
)


def known_key(key: str) -> bool:
    lowered = key.lower()
    return (
        lowered in GLOBAL_KEYS
        or lowered in S3_KEYS
        or any(lowered.startswith(p) and len(lowered) > len(p) for p in PREFIX_KEYS)
    )


def split_operator(name: str) -> tuple[str | None, str, bool]:
    """ "ForAnyValue:StringLikeIfExists" → ("ForAnyValue", "StringLike", True)."""
    qualifier: str | None = None
    if ":" in name:
        qualifier, name = name.split(":", 1)
        if qualifier not in ("ForAnyValue", "ForAllValues"):
            raise ConditionError(f"Invalid Condition type : {qualifier}:{name}")
    if_exists = name.endswith("IfExists") and name != "IfExists"
    base = name[: -len("IfExists")] if if_exists else name
    if base != "Null" and base not in OPERATORS:
        raise ConditionError(f"Invalid Condition type : {name}")
    if base == "Null" and (if_exists or qualifier):
        raise ConditionError(f"Invalid Condition type : {name}")
    return qualifier, base, if_exists


def _as_strings(value: Any) -> list[str]:
    values = value if isinstance(value, list) else [value]
    out: list[str] = []
    for item in values:
        if isinstance(item, bool):
            out.append("true" if item else "false")
        elif isinstance(item, (str, int, float)):
            out.append(str(item))
        else:
            raise ConditionError("Invalid Condition value")
    return out


Block = list[tuple[str | None, str, bool, str, list[str]]]


def parse_block(raw: Any) -> Block:
    """A Condition element as (qualifier, operator, if_exists, key, values) rows; ConditionError if bad."""
    if not isinstance(raw, dict):
        raise ConditionError("Condition must be an object")
    rows: Block = []
    for name, keys in raw.items():
        qualifier, base, if_exists = split_operator(name)
        if not isinstance(keys, dict) or not keys:
            raise ConditionError(f"Invalid Condition type : {name}")
        for key, value in keys.items():
            if not known_key(key):
                raise ConditionError("Policy has an invalid condition key")
            values = _as_strings(value)
            check = _check_bool if base == "Null" else OPERATORS[base][2]
            for one in values:
                try:
                    check(one)
                except ValueError:
                    raise ConditionError(f"Invalid Condition value for {name}: {one}") from None
            rows.append((qualifier, base, if_exists, key, values))
    return rows


def _matches_one(compare: Compare, request_value: str, policy_values: list[str]) -> bool:
    return any(compare(request_value, v) for v in policy_values)


def holds(block: Block, context: Context, substitute: Callable[[str], str] | None = None) -> bool:
    """True when every row of the block holds for the request."""
    for qualifier, base, if_exists, key, values in block:
        present = context.get(key)
        if base == "Null":
            missing = present is None or present == []
            if not any((v.lower() == "true") == missing for v in values):
                return False
            continue
        compare, negated, _ = OPERATORS[base]
        if substitute is not None and base.startswith("String"):
            values = [substitute(v) for v in values]
        if present is None:
            if if_exists or negated or qualifier == "ForAllValues":
                continue
            return False
        if qualifier == "ForAllValues":
            result = all(_matches_one(compare, item, values) for item in present)
            if negated:
                result = all(not _matches_one(compare, item, values) for item in present)
        elif qualifier == "ForAnyValue":
            result = any(_matches_one(compare, item, values) for item in present)
            if negated:
                result = any(not _matches_one(compare, item, values) for item in present)
        else:
            matched = any(_matches_one(compare, item, values) for item in present)
            result = not matched if negated else matched
        if not result:
            return False
    return True


def mapping_context(values: Mapping[str, list[str]]) -> Context:
    """A context from a plain mapping (keys compared case-insensitively, as IAM does)."""
    lowered = {k.lower(): v for k, v in values.items()}

    class _Context:
        def get(self, key: str) -> list[str] | None:
            return lowered.get(key.lower())

    return _Context()
