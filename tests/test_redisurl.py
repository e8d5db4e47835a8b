"""Tests for Redis URLs: parsing, the password-free form, and crawl names."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hashcrawl._exceptions import ConfigError, InvalidURL
from hashcrawl._redisurl import RedisURL, check_crawl_name

SECRET = "pw-secret"

#: Passwords as users pick them: any text, marked so that it never matches by chance.
passwords = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=16).map(
    lambda text: "Zq" + text
)


def assert_hidden(password: str, *texts: str) -> None:
    """Neither the password nor its percent-encoded form appears in any of ``texts``."""
    forms = {password, quote(password, safe=""), quote(password)}
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
    assert url.redacted() == "rediss://:***@redis.example:6390/1"


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


# -- the redacted form ---------------------------------------------------------------------


def test_redacted_masks_the_password_and_keeps_the_rest() -> None:
    """redacted() shows user, host, port and db, with *** where the password was."""
    url = RedisURL.parse(f"redis://alice:{SECRET}@h:6380/3")
    assert url.redacted() == "redis://alice:***@h:6380/3"
    assert str(url) == url.redacted()
    assert repr(url) == "RedisURL('redis://alice:***@h:6380/3')"


def test_redacted_without_password_shows_no_mask() -> None:
    """A URL without a password reads as it was, with the defaults filled in."""
    assert RedisURL.parse("redis://h").redacted() == "redis://h:6379/0"
    assert RedisURL.parse("redis://bob@h/1").redacted() == "redis://bob@h:6379/1"


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
    ):
        assert_hidden(password, message_of(text))


# -- refused URLs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://x", "must be redis://, rediss:// or redis+unix://"),
        ("x", "must be redis://, rediss:// or redis+unix://"),
        ("", "must be redis://, rediss:// or redis+unix://"),
        ("redis://", "no host"),
        ("redis://h:port/0", "bad port"),
        ("redis://h:70000/0", "bad port"),
        ("redis://h/zero", "bad database number"),
        ("redis://h/-1", "bad database number"),
        ("redis+unix://", "no socket path"),
        ("redis+unix:///s.sock?db=x", "bad database number"),
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
