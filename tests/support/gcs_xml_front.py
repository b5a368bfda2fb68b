"""A stateless front for fake-gcs-server that turns GCS XML API object uploads into the JSON
API simple uploads the emulator serves; every other request passes through unchanged.

Why it exists: obstore (the Rust ``object_store`` crate) writes to GCS with the XML API,
``PUT /{bucket}/{object}`` and ``x-goog-if-generation-match: 0`` for a create. fake-gcs-server
(v1.56.1, the newest release) serves the XML API's reads, listings and deletes, but has no
XML upload: such a PUT answers 400 "invalid uploadType" (its issue #331, "Consider XML
support for object PUT/GET", and the pull request #1164 that adds it were open when looked
up). Its JSON API simple upload
(``POST /upload/storage/v1/b/{bucket}/o?uploadType=media&name=...&ifGenerationMatch=0``)
does honour the precondition, and decides it under the backend's lock (412 when the object
exists), which is the behaviour the tests need.

So this front rewrites that one request and nothing else. It holds no state and decides
nothing: the precondition header is passed on as the query parameter it means, and the
emulator's answer (200, 412, anything) goes back as it came, with the emulator's ETag and
generation moved from the JSON body into the XML API's response headers (``ETag``,
``x-goog-generation``), where obstore reads them. Whether a conditional create is atomic is
therefore the emulator's doing, and the 16-racer test measures exactly that.

Run as ``python -m tests.support.gcs_xml_front --port N --upstream http://127.0.0.1:M``
(tests/support/gcs_server.py starts it); it prints ``ready`` once it listens.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Headers that describe one hop, not the message: the front sets its own.
_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "proxy-connection",
    "te",
    "upgrade",
}


def upload_target(path: str, query: str, headers: dict[str, str]) -> str | None:
    """The JSON API upload URL that an XML API ``PUT /{bucket}/{object}`` means, or ``None``
    when the PUT is something else (a multipart part, a bucket-level request).

    :param path: the request's path, percent-encoded as sent (``/eod/p%2Fk.json``).
    :param query: the request's query string.
    :param headers: the request's headers, names lower-cased.
    """
    params = urllib.parse.parse_qs(query)
    if "uploadId" in params or "partNumber" in params or "uploadType" in params:
        return None
    bucket, sep, name = path.lstrip("/").partition("/")
    if not sep or not name or not bucket:
        return None
    target = {"uploadType": "media", "name": urllib.parse.unquote(name)}
    if "x-goog-if-generation-match" in headers:
        target["ifGenerationMatch"] = headers["x-goog-if-generation-match"]
    return f"/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?{urllib.parse.urlencode(target)}"


class _Front(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: tuple[str, int] = ("127.0.0.1", 0)

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send_upstream(
        self, method: str, url: str, body: bytes, headers: dict[str, str]
    ) -> tuple[http.client.HTTPResponse, bytes]:
        # A new connection per request, never retried: a request the front sent twice could
        # land twice, and a conditional create's answer must be the emulator's to the one
        # request the client made.
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.request(method, url, body=body, headers=headers)
            resp = conn.getresponse()
            return resp, resp.read()
        finally:
            conn.close()

    def _relay(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        split = urllib.parse.urlsplit(self.path)
        target = None
        if self.command == "PUT":
            target = upload_target(split.path, split.query, {k.lower(): v for k, v in headers.items()})
        if target is None:
            resp, data = self._send_upstream(self.command, self.path, body, headers)
            self.send_response(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP:
                    self.send_header(k, v)
            self.send_header(
                "Content-Length",
                str(len(data) if self.command != "HEAD" else resp.getheader("Content-Length") or 0),
            )
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            return
        headers.pop("x-goog-if-generation-match", None)
        resp, data = self._send_upstream("POST", target, body, headers)
        if resp.status != 200:
            self.send_response(resp.status, resp.reason)
            self.send_header("Content-Type", resp.getheader("Content-Type") or "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        made = json.loads(data)
        self.send_response(200, "OK")
        self.send_header("ETag", f'"{made.get("etag", "")}"')
        self.send_header("x-goog-generation", str(made.get("generation", "")))
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = _relay


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the emulator, http://127.0.0.1:PORT")
    args = parser.parse_args(argv)
    up = urllib.parse.urlsplit(args.upstream)
    _Front.upstream = (up.hostname or "127.0.0.1", int(up.port or 80))
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _Front)
    server.daemon_threads = True
    print("ready", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
