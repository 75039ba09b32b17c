"""Access control lists: canned ACLs, x-amz-grant-* headers, the AccessControlPolicy document.

An ACL is an owner and a list of grants (grantee, permission). Buckets keep theirs in the bucket
configuration ("authz/acl"), objects in their metadata; an object or bucket without one has the
default: its owner has FULL_CONTROL. Grants matter to a decision only while the bucket's object
ownership setting leaves ACLs enabled (not BucketOwnerEnforced), as in S3.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from xml.etree.ElementTree import Element

from server.errors import InvalidArgument, MalformedACLError, UnresolvableGrantByEmailAddress
from server.xml_io import escape_text

ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTHENTICATED_USERS = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"
LOG_DELIVERY = "http://acs.amazonaws.com/groups/s3/LogDelivery"
GROUPS = (ALL_USERS, AUTHENTICATED_USERS, LOG_DELIVERY)
PERMISSIONS = ("FULL_CONTROL", "WRITE", "WRITE_ACP", "READ", "READ_ACP")
CANNED_ACLS = (
    "private", "public-read", "public-read-write", "authenticated-read", "aws-exec-read",
    "bucket-owner-read", "bucket-owner-full-control", "log-delivery-write",
)  # fmt: skip
GRANT_HEADERS = {
    "x-amz-grant-read": "READ",
    "x-amz-grant-write": "WRITE",
    "x-amz-grant-read-acp": "READ_ACP",
    "x-amz-grant-write-acp": "WRITE_ACP",
    "x-amz-grant-full-control": "FULL_CONTROL",
}
XSI = "http://www.w3.org/2001/XMLSchema-instance"

# Which ACL permission an action needs: on the bucket's ACL, or on the object's ACL.
BUCKET_PERMISSION = {
    "s3:ListBucket": "READ", "s3:ListBucketVersions": "READ", "s3:ListBucketMultipartUploads": "READ",
    "s3:PutObject": "WRITE", "s3:DeleteObject": "WRITE", "s3:GetBucketAcl": "READ_ACP",
    "s3:PutBucketAcl": "WRITE_ACP",
}  # fmt: skip
OBJECT_PERMISSION = {"s3:GetObject": "READ", "s3:GetObjectAcl": "READ_ACP", "s3:PutObjectAcl": "WRITE_ACP"}


@dataclass(frozen=True)
class Grant:
    kind: str  # CanonicalUser | Group
    grantee: str  # canonical id or group URI
    permission: str

    @property
    def is_public(self) -> bool:
        return self.kind == "Group" and self.grantee in (ALL_USERS, AUTHENTICATED_USERS)


@dataclass(frozen=True)
class Acl:
    owner: str  # canonical id
    grants: tuple[Grant, ...]
    owner_name: str = ""

    @property
    def is_public(self) -> bool:
        return any(g.is_public for g in self.grants)

    def allows(self, permission: str, caller_id: str | None, *, ignore_public: bool = False) -> Grant | None:
        """The grant giving `permission` to the caller (None: anonymous), or None."""
        for grant in self.grants:
            if grant.permission not in (permission, "FULL_CONTROL"):
                continue
            if ignore_public and grant.is_public:
                continue
            if grant.kind == "Group":
                if grant.grantee == ALL_USERS or (
                    grant.grantee == AUTHENTICATED_USERS and caller_id is not None
                ):
                    return grant
            elif caller_id is not None and grant.grantee == caller_id:
                return grant
        return None

    def to_json(self) -> str:
        return json.dumps(
            {
                "owner": self.owner,
                "name": self.owner_name,
                "grants": [[g.kind, g.grantee, g.permission] for g in self.grants],
            }
        )

    @classmethod
    def from_json(cls, raw: str | dict[str, Any]) -> Acl:
        data = json.loads(raw) if isinstance(raw, str) else raw
        return cls(data["owner"], tuple(Grant(*g) for g in data["grants"]), data.get("name", ""))

    def to_xml(self, names: dict[str, str] | None = None) -> bytes:
        names = names or {}
        out = [
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<AccessControlPolicy xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
            f"<Owner><ID>{self.owner}</ID><DisplayName>{escape_text(self.owner_name)}</DisplayName></Owner>",
            "<AccessControlList>",
        ]
        for grant in self.grants:
            if grant.kind == "Group":
                grantee = (
                    f'<Grantee xmlns:xsi="{XSI}" xsi:type="Group"><URI>{escape_text(grant.grantee)}</URI>'
                    "</Grantee>"
                )
            else:
                name = names.get(grant.grantee, self.owner_name if grant.grantee == self.owner else "")
                grantee = (
                    f'<Grantee xmlns:xsi="{XSI}" xsi:type="CanonicalUser"><ID>{escape_text(grant.grantee)}'
                    f"</ID><DisplayName>{escape_text(name)}</DisplayName></Grantee>"
                )
            out.append(f"<Grant>{grantee}<Permission>{grant.permission}</Permission></Grant>")
        out.append("</AccessControlList></AccessControlPolicy>")
        return "".join(out).encode()


def private(owner: str, owner_name: str = "") -> Acl:
    return Acl(owner, (Grant("CanonicalUser", owner, "FULL_CONTROL"),), owner_name)


def canned(name: str, owner: str, bucket_owner: str, owner_name: str = "") -> Acl:
    grants = [Grant("CanonicalUser", owner, "FULL_CONTROL")]
    if name in ("public-read", "public-read-write"):
        grants.append(Grant("Group", ALL_USERS, "READ"))
    if name == "public-read-write":
        grants.append(Grant("Group", ALL_USERS, "WRITE"))
    if name == "authenticated-read":
        grants.append(Grant("Group", AUTHENTICATED_USERS, "READ"))
    if name == "log-delivery-write":
        grants += [Grant("Group", LOG_DELIVERY, "WRITE"), Grant("Group", LOG_DELIVERY, "READ_ACP")]
    if name in ("bucket-owner-read", "bucket-owner-full-control") and bucket_owner != owner:
        grants.append(
            Grant("CanonicalUser", bucket_owner, "READ" if name == "bucket-owner-read" else "FULL_CONTROL")
        )
    return Acl(owner, tuple(grants), owner_name)


_GRANTEE_RE = re.compile(r'\s*(id|uri|emailAddress)\s*=\s*"([^"]*)"\s*(?:,|$)', re.IGNORECASE)


def grants_from_headers(headers: Any) -> list[Grant] | None:
    """The x-amz-grant-* headers as grants, or None when the request has none."""
    grants: list[Grant] = []
    seen = False
    for header, permission in GRANT_HEADERS.items():
        value = headers.get(header)
        if value is None:
            continue
        seen = True
        position = 0
        value = value.strip()
        while position < len(value):
            match = _GRANTEE_RE.match(value, position)
            if not match:
                raise InvalidArgument("Invalid header value", ArgumentName=header, ArgumentValue=value)
            kind, grantee = match.group(1).lower(), match.group(2)
            if kind == "emailaddress":
                raise UnresolvableGrantByEmailAddress(EmailAddress=grantee)
            if kind == "uri" and grantee not in GROUPS:
                raise InvalidArgument("Invalid group uri", ArgumentName="uri", ArgumentValue=grantee)
            grants.append(Grant("Group" if kind == "uri" else "CanonicalUser", grantee, permission))
            position = match.end()
    return grants if seen else None


def acl_from_request(
    headers: Any, owner: str, bucket_owner: str, owner_name: str = ""
) -> tuple[Acl | None, str | None]:
    """The ACL a write request asks for (canned or grant headers) and the canned name, or (None, None).

    Both at once is refused, as in S3."""
    canned_name = headers.get("x-amz-acl")
    grants = grants_from_headers(headers)
    if canned_name is not None and grants is not None:
        raise InvalidArgument("Specifying both Canned ACLs and Header Grants is not allowed")
    if canned_name is not None:
        if canned_name not in CANNED_ACLS:
            raise InvalidArgument(ArgumentName="x-amz-acl", ArgumentValue=canned_name)
        return canned(canned_name, owner, bucket_owner, owner_name), canned_name
    if grants is not None:
        return Acl(owner, tuple(grants), owner_name), None
    return None, None


def parse_acl_xml(root: Element) -> Acl:
    """An AccessControlPolicy document (already parsed); MalformedACLError if it is not one."""
    if root.tag != "AccessControlPolicy":
        raise MalformedACLError()
    owner_el = root.find("Owner")
    owner = owner_el.findtext("ID") if owner_el is not None else None
    acl_el = root.find("AccessControlList")
    if not owner or acl_el is None:
        raise MalformedACLError()
    grants: list[Grant] = []
    for grant in acl_el.findall("Grant"):
        grantee = grant.find("Grantee")
        permission = (grant.findtext("Permission") or "").strip()
        if grantee is None or permission not in PERMISSIONS:
            raise MalformedACLError()
        kind = grantee.get(f"{{{XSI}}}type") or grantee.get("type") or ""
        if kind == "CanonicalUser" and grantee.findtext("ID"):
            grants.append(Grant("CanonicalUser", (grantee.findtext("ID") or "").strip(), permission))
        elif kind == "Group" and grantee.findtext("URI"):
            uri = (grantee.findtext("URI") or "").strip()
            if uri not in GROUPS:
                raise MalformedACLError()
            grants.append(Grant("Group", uri, permission))
        elif kind == "AmazonCustomerByEmail":
            raise UnresolvableGrantByEmailAddress(EmailAddress=grantee.findtext("EmailAddress") or "")
        else:
            raise MalformedACLError()
    assert owner_el is not None
    return Acl(owner.strip(), tuple(grants), owner_el.findtext("DisplayName") or "")


def is_owner_full_control(acl: Acl, bucket_owner: str) -> bool:
    """The only ACLs a BucketOwnerEnforced bucket accepts: the owner alone, with full control
    (private, bucket-owner-full-control, or that written out as grants / XML)."""
    if not acl.grants:
        return True
    only_owners = all(
        g.kind == "CanonicalUser"
        and g.grantee in (bucket_owner, acl.owner)
        and g.permission == "FULL_CONTROL"
        for g in acl.grants
    )
    return only_owners and any(g.grantee == bucket_owner for g in acl.grants)
