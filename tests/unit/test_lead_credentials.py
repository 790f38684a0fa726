"""Lead tokens: `name=token` pairs or plain tokens, the names actions are recorded under, and the
dashboard's session key derived from the signing secret. Writer and exporter tokens are read the
same way."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from dynaval.entrypoints.auth import Caller, Role, Unauthorized, caller_of, caller_of_token, role_of
from dynaval.settings import LeadCredential, Settings, lead_credential

WRITER = "writer-token-0123456789abcdef"
PLAIN = "plain-lead-token-0123456789abcd"
NAMED = "ada-lead-token-0123456789abcdef"


def settings(**values: object) -> Settings:
    base: dict[str, object] = {
        "writer_tokens": [WRITER],
        "lead_tokens": [PLAIN, f"ada={NAMED}"],
        "webhook_secret": "webhook-secret-0123456789abcdef",
        "pseudonym_secret": "pseudonym-secret-0123456789abcd",
        "signing_secret": "signing-secret-0123456789abcdef",
    }
    base.update(values)
    return Settings(**base)  # type: ignore[arg-type]


def plain_name(token: str) -> str:
    return "lead-" + hashlib.sha256(token.encode()).hexdigest()[:8]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (f"ada={NAMED}", LeadCredential("ada", NAMED)),
        (f"grace.hopper@lab={NAMED}", LeadCredential("grace.hopper@lab", NAMED)),
        (f"ada={NAMED}=", LeadCredential("ada", f"{NAMED}=")),  # only the first = splits
        (PLAIN, LeadCredential(plain_name(PLAIN), PLAIN)),
        # A base64 token ending in = padding stays a plain token, and so does one whose part before
        # the first = is no name.
        (
            "dG9rZW4tMDEyMzQ1Njc4OWFiY2RlZg==",
            LeadCredential(
                plain_name("dG9rZW4tMDEyMzQ1Njc4OWFiY2RlZg=="), "dG9rZW4tMDEyMzQ1Njc4OWFiY2RlZg=="
            ),
        ),
        (
            "a+b/c=0123456789abcdef",
            LeadCredential(plain_name("a+b/c=0123456789abcdef"), "a+b/c=0123456789abcdef"),
        ),
    ],
)
def test_an_entry_is_a_name_and_token_or_a_plain_token(entry: str, expected: LeadCredential) -> None:
    assert lead_credential(entry) == expected


def test_names_come_from_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNAVAL_LEAD_TOKENS", f"{PLAIN}, ada={NAMED}")
    loaded = Settings(
        writer_tokens=[WRITER],
        webhook_secret="webhook-secret-0123456789abcdef",
        pseudonym_secret="pseudonym-secret-0123456789abcd",
        signing_secret="signing-secret-0123456789abcdef",
    )
    assert loaded.lead_credentials == [LeadCredential(plain_name(PLAIN), PLAIN), LeadCredential("ada", NAMED)]


def test_a_token_identifies_its_lead_and_role_of_still_answers() -> None:
    config = settings()
    assert caller_of_token(config, NAMED) == Caller(Role.LEAD, "ada")
    assert caller_of_token(config, PLAIN) == Caller(Role.LEAD, plain_name(PLAIN))
    assert caller_of_token(config, WRITER) == Caller(
        Role.WRITER, "writer-" + hashlib.sha256(WRITER.encode()).hexdigest()[:8]
    )
    assert caller_of_token(config, f"ada={NAMED}") is None  # the pair itself is no token
    assert caller_of_token(config, "unknown-token-0123456789abcdef") is None
    assert caller_of(config, f"Bearer {NAMED}") == Caller(Role.LEAD, "ada")
    assert role_of(config, f"Bearer {NAMED}") is Role.LEAD
    assert role_of(config, f"Bearer {WRITER}") is Role.WRITER
    with pytest.raises(Unauthorized):
        role_of(config, "Bearer ada")


def test_a_weak_token_in_a_pair_is_refused_and_named() -> None:
    with pytest.raises(ValueError, match="DYNAVAL_LEAD_TOKENS"):
        settings(lead_tokens=["ada=secret"])
    with pytest.raises(ValueError, match="DYNAVAL_SESSION_SECRET"):
        settings(session_secret="changeme")
    assert settings(lead_tokens=["ada=secret"], development=True).lead_credentials[0].token == "secret"


def test_the_session_key_is_derived_from_the_signing_secret_unless_set() -> None:
    derived = settings().resolved_session_secret
    expected = hmac.new(
        b"signing-secret-0123456789abcdef", b"dynaval:session-cookie", hashlib.sha256
    ).hexdigest()
    assert derived == expected and derived != "signing-secret-0123456789abcdef"
    assert settings(signing_secret="another-signing-secret-012345").resolved_session_secret != derived
    assert settings(session_secret="session-secret-0123456789abcdef").resolved_session_secret == (
        "session-secret-0123456789abcdef"
    )


EXPORTER = "exporter-token-0123456789abcdef"


def test_writer_and_exporter_tokens_are_named_like_lead_tokens() -> None:
    config = settings(
        writer_tokens=[f"ann={WRITER}", "plain-writer-token-0123456789"], exporter_tokens=[EXPORTER]
    )
    assert caller_of_token(config, WRITER) == Caller(Role.WRITER, "ann")
    plain = "plain-writer-token-0123456789"
    assert caller_of_token(config, plain) == Caller(
        Role.WRITER, "writer-" + hashlib.sha256(plain.encode()).hexdigest()[:8]
    )
    assert caller_of_token(config, EXPORTER) == Caller(
        Role.EXPORTER, "exporter-" + hashlib.sha256(EXPORTER.encode()).hexdigest()[:8]
    )
    assert caller_of_token(config, f"ann={WRITER}") is None
    # Only a writer is limited to their own candidates.
    owners = [caller.owner for t in (WRITER, EXPORTER, NAMED) if (caller := caller_of_token(config, t))]
    assert owners == ["ann", None, None]


def test_exporter_tokens_are_optional_but_never_weak() -> None:
    assert settings().exporter_credentials == []
    with pytest.raises(ValueError, match="DYNAVAL_EXPORTER_TOKENS") as refused:
        settings(exporter_tokens=["bob=changeme"])
    assert "DYNAVAL_WRITER_TOKENS" not in str(refused.value)
    with pytest.raises(ValueError, match="DYNAVAL_WRITER_TOKENS"):
        settings(writer_tokens=["ann=short"])
    assert settings(exporter_tokens=["dev"], development=True).exporter_credentials[0].token == "dev"


def test_a_value_set_for_two_roles_or_as_a_secret_is_refused_and_named() -> None:
    with pytest.raises(ValueError, match="DYNAVAL_EXPORTER_TOKENS, DYNAVAL_LEAD_TOKENS") as refused:
        settings(exporter_tokens=[f"bob={NAMED}"])
    assert NAMED not in str(refused.value)
    with pytest.raises(ValueError, match="DYNAVAL_WEBHOOK_SECRET, DYNAVAL_WRITER_TOKENS"):
        settings(webhook_secret=WRITER)


def test_no_secret_shows_in_the_settings_repr_or_in_a_refusal() -> None:
    api_key, session = "label-studio-key-0123456789abcdef", "session-secret-0123456789abcdef"
    config = settings(
        label_studio_api_key=api_key, exporter_tokens=[f"bob={EXPORTER}"], session_secret=session
    )
    values = [WRITER, PLAIN, NAMED, EXPORTER, api_key, session, "webhook-secret-0123456789abcdef"]
    values += ["signing-secret-0123456789abcdef", "pseudonym-secret-0123456789abcd"]
    shown = repr(config) + str(config) + repr(config.lead_credentials + config.exporter_credentials)
    assert [v for v in values if v in shown] == []
    # Pydantic would quote the input (the tail of the last secret, here) in its error.
    with pytest.raises(ValueError) as refused:
        settings(pseudonym_secret="short", signing_secret="signing-secret-tail-0123456789")
    assert "0123456789" not in str(refused.value)


COLLECTOR = "collector-token-0123456789abcdef"


def test_collector_tokens_are_named_optional_and_never_weak() -> None:
    assert settings().collector_credentials == []
    config = settings(collector_tokens=[f"field-form={COLLECTOR}"])
    collector = caller_of_token(config, COLLECTOR)
    assert collector == Caller(Role.COLLECTOR, "field-form")
    # A collector reads back what it submitted, and names the writers it submits for.
    assert collector.owner == "field-form" and collector.submits_for_others
    writer = caller_of_token(config, WRITER)
    assert writer is not None and not writer.submits_for_others
    with pytest.raises(ValueError, match="DYNAVAL_COLLECTOR_TOKENS") as refused:
        settings(collector_tokens=["form=changeme"])
    assert "DYNAVAL_WRITER_TOKENS" not in str(refused.value)
    with pytest.raises(ValueError, match="DYNAVAL_COLLECTOR_TOKENS, DYNAVAL_WRITER_TOKENS"):
        settings(collector_tokens=[WRITER])


def test_one_token_per_writer_and_one_name_per_role() -> None:
    other = "another-writer-token-0123456789"
    # Two writers sharing a token would be one writer: refused, in development too.
    for development in (False, True):
        with pytest.raises(ValueError, match="one token is set under two names in DYNAVAL_WRITER_TOKENS"):
            settings(writer_tokens=[f"ana={WRITER}", f"bo={WRITER}"], development=development)
    # One writer may hold two tokens (an old and a new one).
    assert [c.name for c in settings(writer_tokens=[f"ana={WRITER}", f"ana={other}"]).writer_credentials] == [
        "ana",
        "ana",
    ]
    # A collector or lead under a writer's name would read that writer's candidates as its own.
    with pytest.raises(ValueError, match="DYNAVAL_COLLECTOR_TOKENS, DYNAVAL_WRITER_TOKENS") as refused:
        settings(writer_tokens=[f"ana={WRITER}"], collector_tokens=[f"ana={COLLECTOR}"])
    assert WRITER not in str(refused.value) and COLLECTOR not in str(refused.value)
    with pytest.raises(ValueError, match="DYNAVAL_LEAD_TOKENS, DYNAVAL_WRITER_TOKENS"):
        settings(writer_tokens=[f"ada={WRITER}"])
