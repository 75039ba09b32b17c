"""Authorization as S3 has it: bucket policies and user policies (the IAM policy language),
ACLs, object ownership controls and Block Public Access, and the one decision made from them.

    actions.py     Operation → IAM action (s3:GetObject) and resource ARN
    policy.py      parse and validate a policy document; match a statement to a request
    conditions.py  the Condition operators and keys
    acl.py         canned ACLs, grant headers, the AccessControlPolicy document
    context.py     the request facts a condition asks about (aws:SourceIp, s3:prefix, ...)
    decision.py    the decision itself: pure, no I/O

`server/authorization.py` feeds the decision (cached bucket documents and user policies) for
every request; `server/handlers/access_api.py` is the S3 API that stores the documents.
"""
