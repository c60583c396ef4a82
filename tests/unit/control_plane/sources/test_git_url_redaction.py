"""The Git URL redactor: userinfo and token parameters never survive, whatever the text;
the rest of a URL (host, path, other parameters) stays readable; no input makes it fail."""

from __future__ import annotations

from urllib.parse import quote

from hypothesis import given, settings
from hypothesis import strategies as st

from control_plane.sources.git_url_redaction import redact_text, redact_url, url_secrets


def test_userinfo_and_token_parameters_are_masked_and_the_rest_kept() -> None:
    assert redact_url("https://user:s3cret@git.example.com/team/routes.git") == "https://***@git.example.com/team/routes.git"
    assert redact_url("https://ghp_abcdef123@github.com/o/r.git") == "https://***@github.com/o/r.git"
    assert (
        redact_url("https://git.example.com/r.git?ref=main&access_token=tok123&private_token=x")
        == "https://git.example.com/r.git?ref=main&access_token=***&private_token=***"
    )
    assert redact_url("https://git.example.com/r.git?Token=T0K") == "https://git.example.com/r.git?Token=***"


def test_what_carries_no_credential_is_unchanged() -> None:
    for url in ("https://git.example.com/team/routes.git", "/srv/git/routes", "git@github.com:o/r.git", "http://127.0.0.1:9/r?ref=main&tokens=1"):
        assert redact_url(url) == url


def test_git_error_text_loses_every_form_of_the_secret() -> None:
    url = "https://oauth2:p%40ss-w0rd@git.example.com/r.git?access_token=tok-123"
    assert set(url_secrets(url)) == {"p%40ss-w0rd", "p@ss-w0rd", "tok-123"}
    error = (
        "git fetch failed: fatal: unable to access 'https://git.example.com/r.git?access_token=tok-123/': "
        "authentication for oauth2 with p@ss-w0rd failed (https://oauth2:p%40ss-w0rd@git.example.com/)"
    )
    redacted = redact_text(error, url)
    for secret in ("p@ss-w0rd", "p%40ss-w0rd", "tok-123"):
        assert secret not in redacted
    assert "git.example.com/r.git" in redacted and "unable to access" in redacted


def test_a_user_name_without_password_is_the_secret_and_a_user_name_with_one_is_not() -> None:
    assert url_secrets("https://ghp_token99@github.com/o/r") == ("ghp_token99",)
    assert url_secrets("https://oauth2:ghp_token99@github.com/o/r") == ("ghp_token99",)
    assert redact_text("oauth2 was refused", "https://oauth2:ghp_token99@github.com/o/r") == "oauth2 was refused"


_SECRET = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=4, max_size=40)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300))
def test_no_text_makes_the_redactor_fail_and_redacting_twice_changes_nothing(text: str) -> None:
    once = redact_url(text)
    assert redact_url(once) == once
    assert isinstance(redact_text(text, text), str)


@settings(max_examples=300, deadline=None)
@given(user=st.text(alphabet="abcdefgh0123_-", max_size=10), password=_SECRET, prefix=st.text(max_size=40), suffix=st.text(max_size=40))
def test_a_password_never_survives_in_any_form_git_might_print(user: str, password: str, prefix: str, suffix: str) -> None:
    encoded = quote(password, safe="")
    url = f"https://{user}:{encoded}@git.example.com/r.git"
    assert redact_url(url) == "https://***@git.example.com/r.git"
    for shown in (url, f"https://{user}:{password}@git.example.com/r.git", password, encoded):
        redacted = redact_text(prefix + shown + suffix, url)
        assert password not in redacted
        assert encoded not in redacted


@settings(max_examples=200, deadline=None)
@given(token=st.text(alphabet=st.characters(codec="ascii", categories=("L", "N")), min_size=4, max_size=40), name=st.sampled_from(["access_token", "private_token", "token", "X-Amz-Signature"]))
def test_a_token_parameter_never_survives(token: str, name: str) -> None:
    url = f"https://git.example.com/r.git?ref=main&{name}={token}"
    assert token not in redact_url(url)
    assert token not in redact_text(f"fatal: unable to access '{url}/': refused ({token})", url)
