"""Tests for Redis URLs: parsing, the password-free form, and crawl names."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import trustme
from hypothesis import given, settings

from hashcrawl._exceptions import ConfigError, InvalidURL, QueueError
from hashcrawl._run._queue import Queue
from hashcrawl._store._redisurl import RedisURL, check_crawl_name, masked
from hashcrawl._store._server import RedisServer
from tests.strategies import passwords

SECRET = "pw-secret"


def assert_hidden(password: str, *texts: str) -> None:
    """Neither the password nor its percent-encoded or repr-escaped form is in ``texts``."""
    forms = {password, quote(password, safe=""), quote(password)}
    forms |= {repr(form)[1:-1] for form in forms}
    for text in texts:
        for form in forms:
            assert form not in text


def message_of(url: str) -> str:
    """The message of the ConfigError that parsing ``url`` raises, checked to be one line."""
    with pytest.raises(ConfigError) as caught:
        RedisURL.parse(url)
    message = str(caught.value)
    assert message and "\n" not in message
    return message


# -- parsing ------------------------------------------------------------------------------


def test_redis_url_defaults_to_port_6379_and_db_0() -> None:
    """A bare redis://host names port 6379, database 0, no user, no password, no TLS."""
    url = RedisURL.parse("redis://cache.internal")
    assert (url.scheme, url.host, url.port, url.db) == ("redis", "cache.internal", 6379, 0)
    assert url.username is None and url.password is None
    assert url.client_kwargs()["ssl"] is False


def test_redis_url_carries_user_password_port_and_db() -> None:
    """redis://user:pw@host:port/db gives every part, the password percent-decoded."""
    url = RedisURL.parse("redis://alice:p%40ss%2Fword@10.0.0.5:6380/3")
    assert (url.host, url.port, url.db) == ("10.0.0.5", 6380, 3)
    assert (url.username, url.password) == ("alice", "p@ss/word")
    kwargs = url.client_kwargs()
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("10.0.0.5", 6380, 3)
    assert (kwargs["username"], kwargs["password"]) == ("alice", "p@ss/word")


def test_password_alone_leaves_username_unset() -> None:
    """redis://:pw@host sends the password to the default user."""
    url = RedisURL.parse(f"redis://:{SECRET}@h:1/0")
    assert url.username is None
    assert url.password == SECRET


def test_rediss_url_turns_tls_on() -> None:
    """rediss:// is the same URL over TLS: the client gets ssl=True."""
    url = RedisURL.parse("rediss://:pw@redis.example:6390/1")
    assert url.scheme == "rediss"
    assert url.client_kwargs()["ssl"] is True
    assert url.redacted() == "rediss://***@redis.example:6390/1"


def test_unix_url_takes_path_db_and_password_from_the_query() -> None:
    """redis+unix:///path?db=N&password=... names a socket, a database and a password."""
    url = RedisURL.parse(f"redis+unix:///run/redis.sock?db=2&password={SECRET}")
    assert (url.scheme, url.path, url.db, url.password) == (
        "redis+unix",
        "/run/redis.sock",
        2,
        SECRET,
    )
    kwargs = url.client_kwargs()
    assert kwargs["unix_socket_path"] == "/run/redis.sock"
    assert (kwargs["db"], kwargs["password"]) == (2, SECRET)
    assert "host" not in kwargs


def test_unix_url_accepts_pass_as_well_as_password() -> None:
    """The query may spell the password ``pass``, as the crawler docs do."""
    assert RedisURL.parse("redis+unix:///s.sock?db=0&pass=s3").password == "s3"


def test_unix_url_without_db_uses_db_0() -> None:
    """A socket URL with no query uses database 0 and no password."""
    url = RedisURL.parse("redis+unix:///tmp/redis.sock")
    assert (url.path, url.db, url.password) == ("/tmp/redis.sock", 0, None)


def test_unix_url_path_is_percent_decoded() -> None:
    """A socket path with a space, written %20 in the URL, names the real file.

    RedisServer.url quotes its socket path, and redis-py decodes it; so must hashcrawl,
    or a --state-dir with a space in it cannot be reached.
    """
    url = RedisURL.parse("redis+unix:///tmp/my%20dir/redis.sock?db=0")
    assert url.path == "/tmp/my dir/redis.sock"
    assert url.client_kwargs()["unix_socket_path"] == "/tmp/my dir/redis.sock"


def test_unix_url_password_is_percent_decoded() -> None:
    """A password with & or = travels percent-encoded in the query and arrives decoded."""
    url = RedisURL.parse("redis+unix:///s.sock?db=0&password=p%26w%3Dx")
    assert url.password == "p&w=x"


def test_sentinel_url_names_the_sentinels_the_service_and_the_db() -> None:
    """redis+sentinel://user:pw@h1:p1,h2,[v6]:p3/service/db gives every sentinel (port
    26379 where none is given), the service, the database and the primary's user and
    password, percent-decoded; no host or port of its own, which the sentinels give."""
    url = RedisURL.parse("redis+sentinel://alice:p%40ss@10.0.0.1:5000,s2,[::1]:26380/main/3")
    assert url.scheme == "redis+sentinel"
    assert url.sentinels == (("10.0.0.1", 5000), ("s2", 26379), ("::1", 26380))
    assert (url.service, url.db, url.username, url.password) == ("main", 3, "alice", "p@ss")
    kwargs = url.client_kwargs()
    assert (kwargs["db"], kwargs["username"], kwargs["password"]) == (3, "alice", "p@ss")
    assert "host" not in kwargs and "port" not in kwargs


def test_sentinel_url_without_a_db_uses_db_0_and_no_password() -> None:
    """redis+sentinel://host/service: one sentinel on 26379, database 0, no password."""
    url = RedisURL.parse("redis+sentinel://sentinel.internal/mymaster")
    assert (url.sentinels, url.service, url.db) == ((("sentinel.internal", 26379),), "mymaster", 0)
    assert url.password is None and url.username is None


@pytest.mark.parametrize("password", ["p#w", "p/w", "p?w", "p@w", "p:w", ",/@:?#"])
def test_a_raw_special_character_in_a_sentinel_url_password_needs_no_escaping(
    password: str,
) -> None:
    """As in redis:// URLs, the user information runs to the last "@"."""
    url = RedisURL.parse(f"redis+sentinel://:{password}@a:1,b:2/svc/1")
    assert (url.password, url.sentinels, url.service, url.db) == (
        password,
        (("a", 1), ("b", 2)),
        "svc",
        1,
    )
    assert_hidden(password, repr(url), str(url))


def test_a_sentinel_url_takes_its_password_from_the_file_or_the_environment(
    tmp_path: Path,
) -> None:
    """--redis-password-file and $HASHCRAWL_REDIS work for a sentinel URL as for any;
    --redis-ca, which needs rediss://, is refused."""
    (tmp_path / "pw").write_text(f"{SECRET}\n")
    url = RedisURL.from_options(
        None,
        password_file=str(tmp_path / "pw"),
        environ={"HASHCRAWL_REDIS": "redis+sentinel://s1,s2/main"},
    )
    assert (url.sentinels, url.password) == ((("s1", 26379), ("s2", 26379)), SECRET)
    with pytest.raises(ConfigError, match="--redis-ca needs a rediss:// URL") as caught:
        RedisURL.from_options(f"redis+sentinel://:{SECRET}@s1/main", ca_file=str(tmp_path / "pw"))
    assert SECRET not in str(caught.value)


# -- the redacted form ---------------------------------------------------------------------


def test_redacted_masks_the_user_information_and_keeps_the_rest() -> None:
    """redacted() shows host, port and db, with *** for everything before the "@"."""
    url = RedisURL.parse(f"redis://alice:{SECRET}@h:6380/3")
    assert url.redacted() == "redis://***@h:6380/3"
    assert str(url) == url.redacted()
    assert repr(url) == "RedisURL('redis://***@h:6380/3')"


def test_redacted_masks_a_user_name_that_is_the_password() -> None:
    """redis://admin:admin@h: the user name is masked too, so the password is not shown."""
    assert_hidden("admin", RedisURL.parse("redis://admin:admin@h/0").redacted())


def test_redacted_without_password_shows_no_mask() -> None:
    """A URL without user information reads as it was, with the defaults filled in."""
    assert RedisURL.parse("redis://h").redacted() == "redis://h:6379/0"
    assert RedisURL.parse("redis://bob@h/1").redacted() == "redis://***@h:6379/1"


def test_sentinel_redacted_lists_the_sentinels_without_the_password() -> None:
    """A sentinel URL's redacted form names every sentinel, the service and the db, with
    *** for the user information."""
    url = RedisURL.parse(f"redis+sentinel://bob:{SECRET}@a,[::1]:7/svc/2")
    assert url.redacted() == "redis+sentinel://***@a:26379,[::1]:7/svc/2"
    assert_hidden(SECRET, repr(url), str(url))
    assert RedisURL.parse("redis+sentinel://a/svc").redacted() == "redis+sentinel://a:26379/svc/0"


def test_unix_redacted_drops_the_password() -> None:
    """A socket URL's redacted form keeps the path and db and drops the password."""
    url = RedisURL.parse(f"redis+unix:///run/redis.sock?db=4&password={SECRET}")
    assert url.redacted() == "redis+unix:///run/redis.sock?db=4"
    assert_hidden(SECRET, repr(url), str(url), url.redacted())


@given(password=passwords)
def test_no_form_of_a_parsed_url_shows_its_password(password: str) -> None:
    """For any password, repr(), str() and redacted() of the parsed URL never contain it."""
    for text in (
        f"redis://user:{quote(password, safe='')}@h:6379/0",
        f"rediss://:{quote(password, safe='')}@h/2",
        f"redis+unix:///run/r.sock?db=1&password={quote(password, safe='')}",
        f"redis+sentinel://u:{quote(password, safe='')}@s1,s2:1/svc/3",
    ):
        url = RedisURL.parse(text)
        assert url.password == password
        assert_hidden(password, repr(url), str(url), url.redacted())


@given(password=passwords)
def test_messages_about_a_bad_tcp_url_never_show_its_password(password: str) -> None:
    """A bad scheme, port or db in a URL with userinfo: the message hides the password."""
    auth = f"user:{quote(password, safe='')}@"
    for text in (
        f"http://{auth}h:6379/0",
        f"redis://{auth}h:notaport/0",
        f"redis://{auth}h:99999/0",
        f"redis://{auth}h:6379/db",
        f"redis://{auth}/0",
        f"redis+sentinel://{auth}s1:port/svc",
        f"redis+sentinel://{auth}s1,,s2/svc",
        f"redis+sentinel://{auth}s1/svc/db",
        f"redis+sentinel://{auth}s1/svc?x=1",
        f"redis+sentinel://{auth}s1",
    ):
        assert_hidden(password, message_of(text))


# -- passwords typed raw -------------------------------------------------------------------


@pytest.mark.parametrize("password", ["p#w", "p/w", "p?w", "p@w", "p:w", "pé€w", "#/?@:", "a@b@c"])
def test_a_raw_special_character_in_a_password_needs_no_escaping(password: str) -> None:
    """User information runs to the last "@": raw # / ? @ : and non-ASCII parse as typed."""
    url = RedisURL.parse(f"redis://alice:{password}@h:6380/2")
    assert (url.username, url.password, url.host, url.port, url.db) == (
        "alice",
        password,
        "h",
        6380,
        2,
    )
    assert_hidden(password, repr(url), str(url))


@given(password=passwords.filter(lambda text: "%" not in text))
def test_any_raw_password_parses_back_and_is_never_shown(password: str) -> None:
    """For any password without "%", typed raw into each URL form, parsing gives it back
    and no printed form of the URL shows it."""
    for text in (
        f"redis://user:{password}@h:6379/0",
        f"rediss://:{password}@h/2",
        f"redis+unix://:{password}@/run/r.sock?db=1",
    ):
        url = RedisURL.parse(text)
        assert url.password == password
        assert_hidden(password, repr(url), str(url), url.redacted())


@given(password=passwords)
def test_messages_about_a_bad_url_never_show_a_raw_password(password: str) -> None:
    """A bad scheme, port, db, host or path in a URL holding any raw password: the
    one-line message hides it, whatever characters it holds."""
    for text in (
        f"http://user:{password}@h:6379/0",
        f"redis//:{password}@h:6379/0",
        f"redis://user:{password}@h:notaport/0",
        f"redis://:{password}@h:99999/0",
        f"rediss://:{password}@h:6379/db",
        f"redis://:{password}@/0",
        f"redis://:{password}@[::1/0",
        f"redis+unix://:{password}@run/r.sock",
        f"redis+unix:///run/r.sock?db=x&password={password}",
        f"unix:///run/r.sock?password={password}",
        f"redis:{password}@h",
    ):
        assert_hidden(password, message_of(text))


@given(password=passwords)
def test_explained_reasons_never_show_the_password(password: str) -> None:
    """A failure text that quotes the password, raw or encoded, is shown without it."""
    url = RedisURL.parse(f"redis://:{quote(password, safe='')}@h:1/0")
    reason = f"AUTH {password} failed; sent {quote(password, safe='')}; {password!r}"
    assert_hidden(password, url.explained(reason))


@given(password=passwords)
def test_masked_hides_a_typed_password_wherever_a_message_quotes_it(password: str) -> None:
    """A message quoting an argument as typed (a misplaced URL, say) is shown without the
    argument's user information, and keeps the rest of its text."""
    typed = f"redis://user:{password}@h:6379/0"
    text = f"--redis must be redis://, got {typed!r}; unrecognized arguments: {typed}"
    shown = masked(text, ["status", typed])
    assert_hidden(password, shown)
    assert shown.startswith("--redis must be redis://, got ")
    assert shown.endswith("unrecognized arguments: redis://***@h:6379/0")


@given(password=passwords.filter(lambda text: "&" not in text))
def test_masked_hides_a_typed_password_parameter(password: str) -> None:
    """A socket URL's password=... as typed is masked wherever a message quotes it."""
    typed = f"redis+unix:///run/r.sock?db=0&password={password}"
    assert_hidden(password, masked(f"bad: {typed}", [typed]))


# -- where the URL and its password come from ---------------------------------------------


def test_the_flag_wins_over_the_environment() -> None:
    """--redis, when given, is used even though $HASHCRAWL_REDIS is set."""
    url = RedisURL.from_options("redis://flag:1/0", environ={"HASHCRAWL_REDIS": "redis://env:2/0"})
    assert url.host == "flag"


def test_without_the_flag_the_environment_names_the_server() -> None:
    """With no --redis, $HASHCRAWL_REDIS is parsed like the flag, password included."""
    url = RedisURL.from_options(None, environ={"HASHCRAWL_REDIS": f"redis://:{SECRET}@env:2/3"})
    assert (url.host, url.port, url.db, url.password) == ("env", 2, 3, SECRET)


@pytest.mark.parametrize("environ", [{}, {"HASHCRAWL_REDIS": ""}])
def test_no_flag_and_no_environment_is_a_one_line_config_error(environ: dict[str, str]) -> None:
    """Neither --redis nor $HASHCRAWL_REDIS: a ConfigError naming both."""
    with pytest.raises(ConfigError) as caught:
        RedisURL.from_options(None, environ=environ)
    assert "--redis" in str(caught.value) and "$HASHCRAWL_REDIS" in str(caught.value)


def test_password_file_gives_its_first_line_as_typed(tmp_path: Path) -> None:
    """The file's first line is the password, raw: no escaping, line ending dropped."""
    secret = "p#w/?@:% é"
    (tmp_path / "pw").write_text(secret + "\nignored\n", encoding="utf-8")
    url = RedisURL.from_options("redis://alice@h/0", password_file=str(tmp_path / "pw"))
    assert (url.username, url.password) == ("alice", secret)
    assert_hidden(secret, repr(url), str(url))


@pytest.mark.parametrize(
    ("content", "rule"),
    [(None, "cannot be read"), ("", "first line"), ("\nlater", "first line"), (b"\xff", "UTF-8")],
)
def test_bad_password_file_is_a_one_line_error_naming_the_flag(
    tmp_path: Path, content: str | bytes | None, rule: str
) -> None:
    """A missing, empty or undecodable password file: ConfigError naming flag and path."""
    path = tmp_path / "pw"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as caught:
        RedisURL.from_options("redis://h/0", password_file=str(path))
    message = str(caught.value)
    assert message.startswith("--redis-password-file") and rule in message
    assert str(path) in message and "\n" not in message


def test_a_password_in_both_url_and_file_is_refused(tmp_path: Path) -> None:
    """Two passwords cannot both be meant: refused, and neither is shown."""
    (tmp_path / "pw").write_text("from-file")
    with pytest.raises(ConfigError) as caught:
        RedisURL.from_options(f"redis://:{SECRET}@h/0", password_file=str(tmp_path / "pw"))
    assert_hidden(SECRET, str(caught.value))
    assert_hidden("from-file", str(caught.value))


# -- TLS ---------------------------------------------------------------------------------------


def test_rediss_verifies_certificate_and_host_name_on_every_redis_py() -> None:
    """rediss:// sets cert checks and host-name checks explicitly (redis-py 5 skips the latter)."""
    kwargs = RedisURL.parse("rediss://h:6390/0").client_kwargs()
    assert kwargs["ssl"] is True
    assert (kwargs["ssl_cert_reqs"], kwargs["ssl_check_hostname"]) == ("required", True)
    assert kwargs["ssl_ca_certs"] is None


def test_redis_ca_is_handed_to_the_client(tmp_path: Path) -> None:
    """--redis-ca FILE becomes ssl_ca_certs, and is checked to hold a certificate."""

    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    url = RedisURL.from_options("rediss://h/0", ca_file=str(tmp_path / "ca.pem"))
    assert url.client_kwargs()["ssl_ca_certs"] == str(tmp_path / "ca.pem")


def test_redis_ca_without_tls_is_refused(tmp_path: Path) -> None:
    """A CA file for a redis:// URL would be silently unused: refused instead."""
    (tmp_path / "ca.pem").write_text("")
    with pytest.raises(ConfigError, match="--redis-ca needs a rediss:// URL"):
        RedisURL.from_options(f"redis://:{SECRET}@h/0", ca_file=str(tmp_path / "ca.pem"))


@pytest.mark.parametrize("content", [None, "not a certificate\n"])
def test_unusable_redis_ca_is_a_one_line_error(tmp_path: Path, content: str | None) -> None:
    """A missing file, or one with no PEM certificate, is refused before any connection."""
    path = tmp_path / "ca.pem"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as caught:
        RedisURL.from_options("rediss://h/0", ca_file=str(path))
    assert str(caught.value).startswith(f"--redis-ca {str(path)!r} cannot be used")
    assert "\n" not in str(caught.value)


# -- connecting: real servers ----------------------------------------------------------------


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private server that requires the password SECRET."""
    with RedisServer(directory=tmp_path_factory.mktemp("guarded"), password=SECRET) as server:
        yield server


@pytest.fixture(scope="module")
def refused_port() -> Iterator[int]:
    """A port bound and never listened on, so every connection is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def failure_of(url: str) -> str:
    """The one-line QueueError that reading a crawl's status at ``url`` raises."""
    with pytest.raises(QueueError) as caught, Queue(url, "secrets", timeout=5) as queue:
        queue.status()
    message = str(caught.value)
    assert message and "\n" not in message
    return message


@settings(max_examples=40, deadline=None)
@given(password=passwords)
def test_a_refused_connection_never_shows_the_password(password: str, refused_port: int) -> None:
    """Nobody listening: for any raw password, the QueueError names the server, not it."""
    message = failure_of(f"redis://:{password}@127.0.0.1:{refused_port}/0")
    assert f"127.0.0.1:{refused_port}" in message
    assert_hidden(password, message)


@settings(max_examples=40, deadline=None)
@given(password=passwords)
def test_a_wrong_password_is_refused_without_showing_it(
    password: str, guarded_server: RedisServer
) -> None:
    """A real server refusing any raw password: the message hides both passwords."""
    message = failure_of(f"redis://:{password}@127.0.0.1:{guarded_server.port}/0")
    assert_hidden(password, message)
    assert_hidden(SECRET, message)


def test_a_raw_password_with_every_trap_character_authenticates(tmp_path: Path) -> None:
    """A server whose password holds # / ? @ : % and non-ASCII is reached by typing it raw
    (a "%" percent-encoded) into the URL."""
    secret = "a#b/c?d@e:f%g é"
    with RedisServer(directory=tmp_path / "redis", password=secret) as server:
        raw = secret.replace("%", "%25")
        with Queue(f"redis://:{raw}@127.0.0.1:{server.port}/0", "secrets") as queue:
            assert queue.status()["crawl"] == "secrets"


# -- refused URLs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://x", "must be redis://, rediss://, redis+unix:// or redis+sentinel://"),
        ("x", "must be redis://, rediss://, redis+unix:// or redis+sentinel://"),
        ("", "must be redis://, rediss://, redis+unix:// or redis+sentinel://"),
        ("redis://", "no host"),
        ("redis://h:port/0", "bad port"),
        ("redis://h:70000/0", "bad port"),
        ("redis://h/zero", "bad database number"),
        ("redis://h/-1", "bad database number"),
        ("redis://h/²", "bad database number"),
        ("redis+unix://run/s.sock", "absolute socket path"),
        ("redis+unix://:pw@/SECRET@run/s.sock", "no '@' in its socket path"),
        ("redis+unix://", "no socket path"),
        ("redis+unix:///s.sock?db=x", "bad database number"),
        ("redis+sentinel://h:26379", "needs the service name"),
        ("redis+sentinel://h:26379/", "needs the service name"),
        ("redis+sentinel:///mymaster", "names no sentinel"),
        ("redis+sentinel://a,,b/mymaster", "bad sentinel ''"),
        ("redis+sentinel://a b/mymaster", "bad sentinel 'a b'"),
        ("redis+sentinel://[::1/mymaster", "bad sentinel '[::1'"),
        ("redis+sentinel://h:port/mymaster", "bad port in 'h:port'"),
        ("redis+sentinel://h:0/mymaster", "bad port in 'h:0'"),
        ("redis+sentinel://h:65536/mymaster", "bad port in 'h:65536'"),
        ("redis+sentinel://h/my master", "service name must be"),
        ("redis+sentinel://h/mymaster/x", "bad database number"),
        ("redis+sentinel://h/mymaster/1/2", "path past /service/db"),
        ("redis+sentinel://h/mymaster?db=1", "no query or fragment"),
        ("redis+sentinel://" + ",".join(["h"] * 17) + "/s", "names 17 sentinels, at most 16"),
    ],
)
def test_bad_url_raises_invalid_url_naming_the_rule(url: str, rule: str) -> None:
    """Each kind of bad URL raises InvalidURL, a ConfigError, whose one line names the rule."""
    with pytest.raises(InvalidURL):
        RedisURL.parse(url)
    message = message_of(url)
    assert message.startswith("--redis")
    assert rule in message


def test_bad_scheme_message_shows_the_url_given() -> None:
    """The message quotes what arrived, so the user sees the typo."""
    assert "'http://x'" in message_of("http://x")


def test_bad_scheme_message_hides_the_password_in_userinfo() -> None:
    """http://:pw@host is refused without repeating pw."""
    message = message_of(f"http://:{SECRET}@h:6379/0")
    assert SECRET not in message
    assert "***" in message


def test_bad_scheme_message_hides_a_percent_encoded_query_password() -> None:
    """A socket URL with a mistyped scheme and an encoded password does not leak it.

    ``unix:///run/redis.sock?password=p%26w`` is a likely typo of a redis+unix URL;
    the message must show neither ``p&w`` nor its encoded form ``p%26w``.
    """
    message = message_of("unix:///run/redis.sock?db=0&password=s3cr%26t")
    assert_hidden("s3cr&t", message)


def test_unparsable_url_raises_config_error_without_the_password() -> None:
    """A URL the standard library cannot split (an unclosed IPv6 bracket) is a ConfigError.

    A bare ValueError would escape the CLI's handler as a traceback with exit status 1.
    """
    message = message_of(f"redis://:{SECRET}@[::1")
    assert SECRET not in message


# -- crawl names ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["default", "Books", "books-2026.10", "a", "x_1", "9" * 64])
def test_good_crawl_names_are_returned_unchanged(name: str) -> None:
    """Letters, digits, '.', '_' and '-', up to 64, starting with a letter or digit, pass."""
    assert check_crawl_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "a b", "-lead", ".hidden", "a{b}", "a:b", "a*", "x" * 65, "é", " a", "a\tb"],
)
def test_bad_crawl_names_raise_config_error_naming_the_parameter(name: str) -> None:
    """An empty or otherwise unusable name raises a one-line ConfigError naming --crawl."""
    with pytest.raises(ConfigError) as caught:
        check_crawl_name(name)
    message = str(caught.value)
    assert message.startswith("--crawl must be")
    assert repr(name) in message
    assert "\n" not in message


def test_crawl_name_with_a_trailing_newline_is_refused() -> None:
    """'abc\\n' is not a crawl name: the check must match the whole string.

    ``re.match`` with ``$`` accepts a final newline, so the name would slip into the
    crawl's Redis keys and into output as a line break.
    """
    with pytest.raises(ConfigError):
        check_crawl_name("abc\n")


@pytest.mark.parametrize(
    ("url", "reason", "where"),
    [
        (
            "redis://127.0.0.1:1/0",
            "Error 111 connecting to 127.0.0.1:1. Connection refused.",
            "127.0.0.1:1",
        ),
        (
            "redis+unix:///tmp/x.sock",
            "Error 2 connecting to /tmp/x.sock. No such file or directory.",
            "/tmp/x.sock",
        ),
    ],
)
def test_a_refused_connection_asks_whether_the_server_runs(
    url: str, reason: str, where: str
) -> None:
    """Nobody listening: the message asks whether a Redis server runs there."""
    assert RedisURL.parse(url).explained(reason).endswith(f"Is a Redis server running at {where}?")
