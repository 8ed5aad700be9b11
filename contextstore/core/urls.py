"""Naming a Redis server without its password (in errors, reprs and logs), and checking a URL's
options before any client is made.

A URL's secrets are its userinfo's password (``redis://user:PASSWORD@host``) and every query
option whose name holds ``password`` (``?password=``, ``?ssl_password=``). Redaction does not
trust the URL to parse: the userinfo runs from ``://`` to the last ``@``, so a password holding
``/``, ``?``, ``#`` or ``@`` is hidden whole, and a URL that fails to parse is still shown
without it.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
#: a query option that holds a secret: its name contains "password"
_SECRET_OPTION = re.compile(r"(?i)([?&;][^=&;#]*password[^=&;#]*=)([^&;#]*)")
#: what a redacted secret is shown as
HIDDEN = "***"


def cluster_url(url: str) -> tuple[str, bool]:
    """The URL without its ``cluster=`` query parameter, and whether that parameter asked for a
    Redis Cluster client (``?cluster=true``). ``ValueError`` for another value."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    flags = [v.lower() for k, v in query if k == "cluster"]
    if not flags:
        return url, False
    if any(f not in _TRUE + _FALSE for f in flags):
        raise ValueError(f"cluster= must be true or false, not {flags[0]!r}")
    rest = urlencode([(k, v) for k, v in query if k != "cluster"])
    return urlunsplit(parts._replace(query=rest)), flags[-1] in _TRUE


def _split_userinfo(url: str) -> tuple[str, str | None, str]:
    """(``scheme://``, the userinfo or None, the rest after its ``@``): the userinfo is all from
    ``://`` to the last ``@``, whatever it holds."""
    scheme, sep, rest = url.partition("://")
    head = scheme + sep if sep else ""
    body = rest if sep else url
    if "@" not in body:
        return head, None, body
    info, _, tail = body.rpartition("@")
    return head, info, tail


def secrets_of(url: str) -> list[str]:
    """Every secret the URL holds, as written and URL-decoded, longest first."""
    _, info, _ = _split_userinfo(url)
    found = []
    if info is not None:
        found.append(info.partition(":")[2] if ":" in info else info)
    found += [m.group(2) for m in _SECRET_OPTION.finditer(url)]
    found += [unquote(s) for s in found]
    return sorted({s for s in found if s}, key=len, reverse=True)


def redact_url(url: str) -> str:
    """The URL without its secrets (``redis://user:***@host/0?ssl_password=***``), even when
    other parts of it are malformed."""
    head, info, tail = _split_userinfo(str(url))
    shown = head
    if info is not None:
        user, colon, _ = info.partition(":")
        shown += f"{user}:{HIDDEN}@" if colon else f"{HIDDEN}@"
    return shown + _SECRET_OPTION.sub(lambda m: m.group(1) + HIDDEN, tail)


#: query options of every URL (redis-py parses each from text: its connection and pool options)
URL_OPTIONS = frozenset(
    """db username password client_name lib_name lib_version socket_timeout socket_connect_timeout
    socket_keepalive socket_read_size retry_on_timeout health_check_interval max_connections timeout
    protocol encoding encoding_errors""".split()
)
#: and of a ``rediss://`` URL (TLS)
TLS_OPTIONS = frozenset(
    """ssl_keyfile ssl_certfile ssl_cert_reqs ssl_ca_certs ssl_ca_path ssl_ca_data ssl_check_hostname
    ssl_password ssl_min_version ssl_ciphers ssl_include_verify_flags ssl_exclude_verify_flags""".split()
)


class UnknownUrlOption(ValueError):
    """A URL's query names an option the client does not take."""

    def __init__(self, name: str, valid: Collection[str]) -> None:
        super().__init__(f"unknown URL option {name!r} (valid: {', '.join(sorted(valid))})")
        self.name = name


def url_options(url: str) -> frozenset[str]:
    """The query options ``url`` may carry (its scheme decides whether TLS's may)."""
    return URL_OPTIONS | TLS_OPTIONS if url.lower().startswith("rediss://") else URL_OPTIONS


def check_options(url: str, valid: Collection[str]) -> None:
    """``UnknownUrlOption`` for the first query option of ``url`` that is not ``valid`` (a client
    would take it and fail on its first call with a ``TypeError``)."""
    try:
        query = urlsplit(url).query
    except ValueError:
        return  # the client's own parse reports it
    for name, _ in parse_qsl(query, keep_blank_values=True):
        if name not in valid:
            raise UnknownUrlOption(name, valid)


def _shares_text(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` have two characters in a row in common."""
    return any(a[i : i + 2] in b for i in range(max(len(a) - 1, 1)))


def url_problem(exc: Exception, url: str) -> str:
    """What is wrong with a URL that did not parse, in words that never quote its secrets: the
    parser's words may quote a piece of a malformed password (``redis://u:a/b@host``, a ``#``
    in it), so with a secret they are shown only for an unknown option whose name shares no text
    with it."""
    secrets = secrets_of(url)
    if isinstance(exc, UnknownUrlOption) and not any(_shares_text(exc.name, s) for s in secrets):
        return str(exc)
    if not secrets:
        return str(exc)
    return "expected redis://[user:password@]host[:port][/db][?option=value] (a password with / ? # @ is %-encoded)"


def describe_client(client: Any) -> str:
    """A password-free description of where a client connects."""
    try:
        kw = client.connection_pool.connection_kwargs
    except AttributeError:
        nodes = getattr(client, "startup_nodes", None)
        if nodes:
            return "redis-cluster://" + ",".join(f"{n.host}:{n.port}" for n in nodes)
        return type(client).__name__
    if kw.get("path"):
        return f"unix://{kw['path']}"
    return f"redis://{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"
