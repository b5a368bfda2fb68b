"""JDBC URLs without secrets: the check that refuses credentials in a URL, and the redaction
of a URL for a message.

A JDBC URL is stored in the plan log, in the submit spec and in the source's identity, and
it is echoed by errors. So it must carry no credential in any form a driver takes (the
connection's login and password reach Spark only as the reader's ``user``/``password``
options). Drivers spell credentials many ways, so the check is broad on purpose:

- userinfo before the host: ``jdbc:mysql://root:s3cret@db/shop``,
  ``jdbc:postgresql://user@db/x`` (any ``@`` in the authority);
- Oracle thin: ``jdbc:oracle:thin:scott/tiger@db:1521/X`` (``user/password@``);
- properties in ``?a=b&c=d`` (MySQL, PostgreSQL), ``;a=b;c=d`` (SQL Server, DB2, Derby,
  ODBC-style ``UID=``/``PWD=``) and ``:a=b;`` (DB2) form, any case: ``user``, ``username``,
  ``uid``, ``userid`` (whole or after a prefix: ``ssl_user``), and every name that, in any
  case and with ``_``, ``-`` and ``.`` ignored, contains ``pass``, ``pwd``, ``secret``,
  ``token``, ``credential``, ``apikey``, ``accesskey``, ``privatekey`` or ``pvtkey``
  (``password1``, ``SecretAccessKey``, ``SessionToken``, ``OAuth2Secret``,
  ``OAuthRefreshToken``, ``javax.net.ssl.keyStorePassword``): drivers keep adding names, so
  the words are matched, not a list of names.

A URL refused here says what to do, and never echoes the URL itself.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from airflow_eod.core.errors import ConfigurationError

# A property name that names a principal: whole, or after a ``.``/``_``/``-`` prefix
# (``ssl_user``), lower case.
_PRINCIPALS = frozenset({"user", "username", "uid", "userid", "sslkey"})
# A property name that holds one of these (lower case, ``_``, ``-`` and ``.`` ignored) may
# carry a secret, whatever the driver: ``password1`` (MySQL multi-factor),
# ``SecretAccessKey``/``AccessKeyID`` (Redshift, Athena), ``SessionToken``, ``OAuth2Secret``
# (Databricks), ``OAuthAccessToken``/``OAuthRefreshToken``/``OAuthPvtKey`` (BigQuery),
# ``sslPassword``, ``javax.net.ssl.keyStorePassword``. Words inside names, not whole names:
# drivers keep adding names, and a list of them was always one short.
_SECRET_PARTS = (
    "pass",
    "pwd",
    "secret",
    "token",
    "credential",
    "apikey",
    "accesskey",
    "privatekey",
    "pvtkey",
)
# A property ``name=value`` after one of the separators drivers use: ``?`` ``&`` ``;`` ``:``
# ``,`` ``(`` and, for URLs written with spaces, whitespace.
_PAIR = re.compile(r"([?&;:\s,(]\s*)([\w.\-]+)(\s*=)([^&;:\s,)]*)")


def _is_secret_name(name: str) -> bool:
    """Whether a property named ``name`` may carry a principal or a secret."""
    lowered = name.lower()
    flat = re.sub(r"[._\-]", "", lowered)
    last = re.split(r"[._\-]", lowered)[-1]
    return flat in _PRINCIPALS or last in _PRINCIPALS or any(part in flat for part in _SECRET_PARTS)


# userinfo in an authority: ``//user[:password]@host``.
_USERINFO = re.compile(r"//[^/?;#\s]*@")
# Oracle thin and OCI: ``jdbc:oracle:thin:user/password@...`` or ``...:user@...``.
_ORACLE = re.compile(r"^(jdbc:oracle:(?:thin|oci|kprb)[^:]*:)(?!@)[^@]*@", re.IGNORECASE)
_LOOSE_USERINFO = re.compile(r"(^|[/:;(\s])[^/:;@()\s*]+[:/][^/:;@()\s*]+@")
# What a redacted URL shows of a value that may be a secret.
_MASK = "***"


def find_credentials(url: str) -> str | None:
    """The kind of credential ``url`` carries (for the error), or ``None`` when it carries none.

    :param url: a JDBC URL.
    """
    if not isinstance(url, str):
        return "a URL that is not text"
    # Drivers percent-decode properties: "pass%77ord=" is "password=" to them.
    for text in (url, unquote(url)):
        for m in _PAIR.finditer(text):
            if _is_secret_name(m.group(2)):
                return f"a {m.group(2)}= property"
        if _ORACLE.search(text):
            return "an Oracle user/password@ prefix"
        if _USERINFO.search(text):
            return "a user[:password]@ before the host"
    return None


def check_jdbc_url(url: str) -> str:
    """``url`` if it is a JDBC URL without credentials; :class:`ConfigurationError` otherwise.

    The error never contains the URL: it may hold the password it is refused for.

    :param url: the JDBC URL of a source.
    """
    if not isinstance(url, str) or not url.startswith("jdbc:"):
        raise ConfigurationError(
            "the JDBC URL must start with 'jdbc:' (the value given is not shown: it may hold a "
            "password); check the connection's host or extra.jdbc_url"
        )
    found = find_credentials(url)
    if found is not None:
        raise ConfigurationError(
            f"the JDBC URL must not carry user or password (it holds {found}; the URL is not shown). "
            "A URL is stored in "
            "the plan log and the submit spec and appears in messages: remove the user and the "
            "password from it, and put them in the Airflow connection's login and password"
        )
    return url


def redact_jdbc_url(url: object) -> str:
    """``url`` with every credential replaced by ``***``, for a message or a log line.

    The value of every property that may be a secret, the userinfo before a host and an
    Oracle ``user/password@`` prefix are masked; the rest (host, port, database) is kept so
    that the message still says which database.

    :param url: a JDBC URL (anything else is shown as its type only).
    """
    if not isinstance(url, str):
        return f"<{type(url).__name__}>"
    text = unquote(url)  # shown decoded: an encoded secret ("pass%77ord=") is masked too
    text = _PAIR.sub(
        lambda m: m.expand(r"\1\2\3") + _MASK if _is_secret_name(m.group(2)) else m.group(0),
        text,
    )
    text = _ORACLE.sub(lambda m: m.group(1) + _MASK + "@", text)
    text = _USERINFO.sub("//" + _MASK + "@", text)
    # Any other ``user/password@`` or ``user:password@`` a driver may take.
    return _LOOSE_USERINFO.sub(lambda m: m.group(1) + _MASK + "@", text)
