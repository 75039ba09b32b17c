"""GetObject / HeadObject with ?partNumber=N: a part is a byte range, answered 206.

AWS answers even part 1 of a single-PUT object (the whole object) with 206 and a Content-Range,
and x-amz-mp-parts-count only for a multipart object (seen on S3 in versity/versitygw#2074;
moto treats it the same way, getmoto/moto#7850). Multipart parts, out-of-range parts (416
InvalidPartNumber) and partNumber with Range (400) are covered in test_ranges_conditionals.
"""

from __future__ import annotations


def test_part_one_of_a_single_put_object_is_a_206_range(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="one", Body=b"0123456789")
    got = s3.get_object(Bucket=bucket, Key="one", PartNumber=1)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert got["ContentRange"] == "bytes 0-9/10"
    assert got["Body"].read() == b"0123456789"
    assert "PartsCount" not in got
    head = s3.head_object(Bucket=bucket, Key="one", PartNumber=1)
    assert head["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert (head["ContentRange"], head["ContentLength"]) == ("bytes 0-9/10", 10)
    assert "PartsCount" not in head
