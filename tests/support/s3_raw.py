"""A plain SigV4-signed S3 request of exactly the key given (no client-side normalisation).

obstore will not write some keys another S3 client writes without a second thought: a key
ending in ``/`` (the AWS console's "Create folder" marker), a key with a control character.
Tests and the chaos harness write them this way, as such a client would.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import urllib.parse


def raw_put(options: dict[str, str], bucket: str, key: str, body: bytes, method: str = "PUT") -> None:
    """``PutObject`` (or, with ``method="DELETE"``, ``DeleteObject``) of exactly ``key`` (no
    client-side normalisation), signed with SigV4."""
    import requests

    endpoint = options["AWS_ENDPOINT_URL"].rstrip("/")
    host = endpoint.split("://", 1)[1]
    region = options.get("AWS_REGION", "us-east-1")
    now = dt.datetime.now(dt.UTC)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    uri = f"/{bucket}/" + urllib.parse.quote(key, safe="/~")
    payload = hashlib.sha256(body).hexdigest()
    headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": stamp}
    signed = ";".join(sorted(headers))
    canonical = "\n".join(
        [method, uri, "", "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)), signed, payload]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = ("AWS4" + options["AWS_SECRET_ACCESS_KEY"]).encode()
    for part in (day, region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={options['AWS_ACCESS_KEY_ID']}/{scope}, "
        f"SignedHeaders={signed}, Signature={sig}"
    )
    answer = requests.request(method, endpoint + uri, data=body, headers=headers, timeout=30)
    assert answer.status_code in (200, 204), answer.text
