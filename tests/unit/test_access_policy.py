"""The policy language and the decision as a pure library: no server, no I/O."""

from __future__ import annotations

import json

import pytest

from server.access.acl import ALL_USERS, Acl, Grant, canned
from server.access.conditions import mapping_context
from server.access.decision import ALL_BLOCKED, BucketAccess, Request, decide
from server.access.policy import Caller, PolicyError, parse_policy

ALICE = Caller(anonymous=False, name="alice", access_key="AKALICE", account="000000000000")
BOB = Caller(anonymous=False, name="bob", access_key="AKBOB", account="000000000000")
ANON = Caller(anonymous=True, account="000000000000")


def bucket_policy(*statements: dict) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def ask(caller: Caller, action: str, resource: str, context: dict | None = None, **kwargs) -> Request:
    return Request(
        caller=caller,
        caller_id=None if caller.anonymous else f"id-{caller.name}",
        is_admin=False,
        action=action,
        resource=resource,
        context=mapping_context(context or {}),
        **kwargs,
    )


def verdict(document: str, request: Request, **bucket_kwargs) -> str:
    policy = parse_policy(document, bucket="b")
    return decide(request, BucketAccess(owner="id-owner", policy=policy, **bucket_kwargs)).reason


def test_wildcards_not_action_not_resource_and_not_principal() -> None:
    doc = bucket_policy(
        {
            "Sid": "A",
            "Effect": "Allow",
            "Principal": "*",
            "NotAction": "s3:Delete*",
            "Resource": "arn:aws:s3:::b/pub/*",
        },
        {
            "Sid": "D",
            "Effect": "Deny",
            "NotPrincipal": {"AWS": "arn:aws:iam::000000000000:user/alice"},
            "Action": "s3:Get*",
            "NotResource": ["arn:aws:s3:::b/pub/*", "arn:aws:s3:::b"],
        },
    )
    assert verdict(doc, ask(BOB, "s3:GetObject", "arn:aws:s3:::b/pub/x")) == "allow:bucket-policy:A"
    assert verdict(doc, ask(BOB, "s3:DeleteObject", "arn:aws:s3:::b/pub/x")) == "deny:implicit"
    assert verdict(doc, ask(BOB, "s3:GetObject", "arn:aws:s3:::b/priv/x")) == "deny:bucket-policy:D"
    assert verdict(doc, ask(ALICE, "s3:GetObject", "arn:aws:s3:::b/priv/x")) == "deny:implicit"


@pytest.mark.parametrize(
    ("condition", "context", "expected"),
    [
        ({"StringEquals": {"s3:prefix": ["a/", "b/"]}}, {"s3:prefix": ["b/"]}, True),
        ({"StringNotEquals": {"s3:prefix": "a/"}}, {}, True),  # a missing key passes a negated operator
        ({"StringEquals": {"s3:prefix": "a/"}}, {}, False),
        ({"StringEqualsIfExists": {"s3:prefix": "a/"}}, {}, True),
        ({"StringEqualsIgnoreCase": {"s3:prefix": "A/"}}, {"s3:prefix": ["a/"]}, True),
        ({"StringLike": {"s3:prefix": "img/*"}}, {"s3:prefix": ["img/train/"]}, True),
        ({"StringNotLike": {"s3:prefix": "img/*"}}, {"s3:prefix": ["img/train/"]}, False),
        ({"NumericLessThanEquals": {"s3:max-keys": "100"}}, {"s3:max-keys": ["50"]}, True),
        ({"NumericGreaterThan": {"s3:max-keys": "100"}}, {"s3:max-keys": ["50"]}, False),
        (
            {"DateLessThan": {"aws:CurrentTime": "2030-01-01T00:00:00Z"}},
            {"aws:CurrentTime": ["2026-12-01T00:00:00Z"]},
            True,
        ),
        (
            {"DateGreaterThan": {"aws:CurrentTime": "2030-01-01T00:00:00Z"}},
            {"aws:CurrentTime": ["2026-12-01T00:00:00Z"]},
            False,
        ),
        ({"Bool": {"aws:SecureTransport": "true"}}, {"aws:SecureTransport": ["false"]}, False),
        ({"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}, {"aws:SourceIp": ["10.1.2.3"]}, True),
        ({"NotIpAddress": {"aws:SourceIp": "10.0.0.0/8"}}, {"aws:SourceIp": ["10.1.2.3"]}, False),
        ({"IpAddress": {"aws:SourceIp": "2001:db8::/32"}}, {"aws:SourceIp": ["2001:db8::1"]}, True),
        ({"Null": {"s3:x-amz-server-side-encryption": "true"}}, {}, True),
        ({"Null": {"s3:x-amz-server-side-encryption": "false"}}, {}, False),
        (
            {"ForAnyValue:StringEquals": {"s3:RequestObjectTagKeys": ["a", "b"]}},
            {"s3:RequestObjectTagKeys": ["c", "b"]},
            True,
        ),
        (
            {"ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["a", "b"]}},
            {"s3:RequestObjectTagKeys": ["c", "b"]},
            False,
        ),
        ({"ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["a"]}}, {}, True),
        ({"StringEquals": {"s3:ExistingObjectTag/team": "ml"}}, {"s3:ExistingObjectTag/team": ["ml"]}, True),
    ],
)
def test_condition_operators(condition: dict, context: dict, expected: bool) -> None:
    doc = bucket_policy(
        {
            "Sid": "C",
            "Effect": "Allow",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": "arn:aws:s3:::b/*",
            "Condition": condition,
        }
    )
    result = verdict(doc, ask(BOB, "s3:GetObject", "arn:aws:s3:::b/k", context))
    assert result == ("allow:bucket-policy:C" if expected else "deny:implicit")


def test_policy_variables_in_resources() -> None:
    policy = parse_policy(
        json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Sid": "Home",
                        "Effect": "Allow",
                        "Action": "s3:*",
                        "Resource": "arn:aws:s3:::b/home/${aws:username}/*",
                    }
                ],
            }
        ),
        user_policy=True,
    )
    mine = ask(ALICE, "s3:PutObject", "arn:aws:s3:::b/home/alice/x")
    theirs = ask(ALICE, "s3:PutObject", "arn:aws:s3:::b/home/bob/x")
    bucket = BucketAccess(owner="id-owner")
    assert decide(mine, bucket, (policy,)).reason == "allow:user-policy:Home"
    assert decide(theirs, bucket, (policy,)).reason == "deny:implicit"
    assert (
        decide(ask(ANON, "s3:PutObject", "arn:aws:s3:::b/home/alice/x"), bucket, (policy,)).reason
        == "deny:implicit"
    )


def test_owner_admin_and_deny_precedence() -> None:
    doc = bucket_policy(
        {
            "Sid": "NoDeletes",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": ["arn:aws:s3:::b", "arn:aws:s3:::b/*"],
        }
    )
    owner = Caller(anonymous=False, name="owner", access_key="AKOWNER", account="000000000000")
    assert verdict(doc, ask(owner, "s3:GetObject", "arn:aws:s3:::b/k")) == "deny:bucket-policy:NoDeletes"
    # The owner can always manage the policy that locks it out.
    assert verdict(doc, ask(owner, "s3:DeleteBucketPolicy", "arn:aws:s3:::b")) == "allow:owner"
    admin = Request(BOB, "id-bob", True, "s3:GetObject", "arn:aws:s3:::b/k", mapping_context({}))
    assert verdict(doc, admin) == "allow:admin"


def test_acl_grants_and_block_public_access() -> None:
    public = canned("public-read", "id-owner", "id-owner")
    get = ask(ANON, "s3:GetObject", "arn:aws:s3:::b/k", object_acl=public, object_owner="id-owner")
    assert decide(get, BucketAccess(owner="id-owner")).reason == "allow:object-acl:READ"
    assert (
        decide(get, BucketAccess(owner="id-owner", ownership="BucketOwnerEnforced")).reason == "deny:implicit"
    )
    assert (
        decide(get, BucketAccess(owner="id-owner", public_access_block=ALL_BLOCKED)).reason == "deny:implicit"
    )
    listing = Acl("id-owner", (Grant("Group", ALL_USERS, "READ"),))
    assert decide(
        ask(ANON, "s3:ListBucket", "arn:aws:s3:::b"), BucketAccess(owner="id-owner", acl=listing)
    ).allowed
    doc = parse_policy(
        bucket_policy(
            {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}
        ),
        bucket="b",
    )
    restricted = BucketAccess(owner="id-owner", policy=doc, public_access_block=ALL_BLOCKED)
    assert not decide(ask(ANON, "s3:GetObject", "arn:aws:s3:::b/k"), restricted).allowed
    assert decide(ask(BOB, "s3:GetObject", "arn:aws:s3:::b/k"), restricted).allowed


@pytest.mark.parametrize(
    ("statement", "public"),
    [
        ({"Principal": "*"}, True),
        ({"Principal": {"AWS": "*"}}, True),
        ({"Principal": {"AWS": "arn:aws:iam::000000000000:user/alice"}}, False),
        ({"Principal": "*", "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}}, False),
        ({"Principal": "*", "Condition": {"IpAddress": {"aws:SourceIp": "0.0.0.0/0"}}}, True),
        ({"Principal": "*", "Condition": {"StringLike": {"s3:prefix": "x/*"}}}, True),
    ],
)
def test_what_s3_calls_public(statement: dict, public: bool) -> None:
    doc = bucket_policy(
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*", **statement}
    )
    assert parse_policy(doc, bucket="b").is_public is public


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ("[]", "Policies must be valid JSON and the first byte must be '{'"),
        (
            '{"Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*", "Principal": "*", "Sid": "a"},'
            ' {"Effect": "Allow", "Action": "s3:*", "Resource": "*", "Principal": "*", "Sid": "a"}]}',
            "Statement IDs (SID) must be unique",
        ),
        (
            '{"Statement": [{"Effect": "Allow", "Resource": "*", "Principal": "*"}]}',
            "Missing required field Action",
        ),
        (
            '{"Statement": [{"Effect": "Allow", "Action": "s3:*", "Principal": "*"}]}',
            "Missing required field Resource",
        ),
        (
            '{"Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*", "Principal": "*",'
            ' "Condition": {"StringEqualz": {"s3:prefix": "a"}}}]}',
            "Invalid Condition type : StringEqualz",
        ),
        (
            '{"Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*", "Principal": "*",'
            ' "Condition": {"IpAddress": {"aws:SourceIp": "not-an-ip"}}}]}',
            "Invalid Condition value for IpAddress: not-an-ip",
        ),
    ],
)
def test_malformed(document: str, reason: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(document, bucket="b")
    assert str(caught.value) == reason
