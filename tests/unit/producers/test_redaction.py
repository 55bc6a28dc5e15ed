"""Redaction: what a policy drops, hashes and masks, checked against the payload models when it
is made, and applied by the recorder before an event reaches the sender or the spool."""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

import orjson
import pytest

from rolltape.infra import open_recorder
from rolltape.infra.settings import Settings
from rolltape.producers import Recorder
from rolltape.producers.privacy import SECRETS, Redaction, RedactionError, RedactionRule
from rolltape.schemas import ChainVerifier
from tests.support.spool import drain

SECRET = b"s" * 32


def mask(text: str, *patterns: str, region: str | None = "US") -> str:
    rule = RedactionRule(
        field="turn.content", action="mask", patterns=patterns or ("email", "phone", "secret")
    )
    policy = Redaction(rules=(rule,), phone_region=region)
    return policy.apply("turn", {"role": "user", "content": text})["content"]


def test_mask_replaces_emails_phone_numbers_and_keys_and_leaves_dates_amounts_and_ids() -> None:
    text = (
        "Call (415) 555-2671 or +44 20 7946 0958, write to jane.doe+work@mail.example.co.uk; "
        "key sk-proj-abcdefghijklmnopqrstuvwx1234, id AKIAIOSFODNN7EXAMPLE. "
        "Due 2024-05-01, $1,234.56, order 12345678, version 3.11.7."
    )
    assert mask(text) == (
        "Call [phone] or [phone], write to [email]; key [secret], id [secret]. "
        "Due 2024-05-01, $1,234.56, order 12345678, version 3.11.7."
    )


@pytest.mark.parametrize(
    ("provider", "token"),
    [
        ("openai / anthropic", "sk-ant-api03-" + "a1B2" * 10),
        ("aws access key id", "ASIAY34FZKBOKMUTVV7A"),
        ("github token", "ghp_" + "x" * 36),
        ("slack token", "xoxb-123456789012-abcdefghij"),
        ("google api key", "AIza" + "S" * 35),
        ("stripe key", "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"),
        ("hugging face token", "hf_" + "abcdefghijklmnopqrstuvwxyzABCD"),
        (
            "json web token",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dBjftJeZ4CVPmB92K27uhbUJU1p1r",
        ),
        ("bearer token", "Bearer abcdefghijklmnop.qrstuvwx-yz012345"),
        (
            "private key block",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
        ),
    ],
)
def test_mask_finds_each_providers_key_shape(provider: str, token: str) -> None:
    assert provider in SECRETS
    assert mask(f"use {token} now", "secret") == "use [secret] now"


def test_mask_finds_national_phone_formats_only_in_the_policys_region() -> None:
    assert mask("ring 020 7946 0958", "phone", region="GB") == "ring [phone]"
    assert mask("ring 020 7946 0958", "phone", region=None) == "ring 020 7946 0958"
    assert mask("ring +44 20 7946 0958", "phone", region=None) == "ring [phone]"


def test_hash_is_an_hmac_under_the_projects_secret_not_a_plain_digest() -> None:
    rule = RedactionRule(field="turn.content", action="hash")
    one = Redaction(rules=(rule,), secret=SECRET)
    other = Redaction(rules=(rule,), secret=b"t" * 32)
    turn = {"role": "user", "content": "jane@example.com"}
    hashed = one.apply("turn", turn)["content"]
    expected = hmac.new(SECRET, b"jane@example.com", hashlib.sha256).hexdigest()
    assert hashed == f"hmac-sha256:{expected}"
    assert hashed == one.apply("turn", dict(turn))["content"]  # equal texts stay equal
    assert hashed != other.apply("turn", turn)["content"]
    assert hashlib.sha256(b"jane@example.com").hexdigest() not in hashed


def test_hash_of_tool_arguments_keeps_their_names_and_numbers() -> None:
    policy = Redaction(
        rules=(RedactionRule(field="tool_call.arguments", action="hash"),), secret=SECRET
    )
    out = policy.apply(
        "tool_call", {"id": "c1", "name": "email", "arguments": {"to": "a@b.io", "n": 2}}
    )
    assert set(out["arguments"]) == {"to", "n"} and out["arguments"]["n"] == 2
    assert out["arguments"]["to"].startswith("hmac-sha256:") and out["name"] == "email"


def test_drop_leaves_a_fields_default_or_an_empty_required_text() -> None:
    policy = Redaction(
        rules=(
            RedactionRule(field="turn.content", action="drop"),
            RedactionRule(field="turn.reasoning", action="drop"),
            RedactionRule(field="tool_call.arguments", action="drop"),
        )
    )
    turn = policy.apply("turn", {"role": "assistant", "content": "hi", "reasoning": "think"})
    assert turn == {"role": "assistant", "content": "", "reasoning": None}
    call = policy.apply("tool_call", {"id": "c", "name": "f", "arguments": {"a": "x"}})
    assert call["arguments"] == {}


def test_where_limits_a_rule_to_matching_payloads_as_hermes_hashes_only_the_system_prompt() -> None:
    policy = Redaction(
        rules=(RedactionRule(field="turn.content", action="hash", where={"role": "system"}),),
        secret=SECRET,
    )
    system = policy.apply("turn", {"role": "system", "content": "You are a helpful agent."})
    user = policy.apply("turn", {"role": "user", "content": "hello"})
    assert system["content"].startswith("hmac-sha256:") and user["content"] == "hello"


def test_a_star_rule_covers_every_event_type_with_the_field() -> None:
    policy = Redaction(rules=(RedactionRule(field="*.content", action="mask"),))
    assert policy.apply("turn", {"role": "user", "content": "a@b.io"})["content"] == "[email]"
    result = {"call_id": "c", "content": "mail a@b.io"}
    assert policy.apply("tool_result", result)["content"] == "mail [email]"


def test_the_callers_payload_is_never_changed_in_place() -> None:
    policy = Redaction(rules=(RedactionRule(field="turn.content", action="mask"),))
    turn = {"role": "user", "content": "a@b.io"}
    assert policy.apply("turn", turn) is not turn and turn["content"] == "a@b.io"
    clean = {"role": "user", "content": "nothing here"}
    assert policy.apply("turn", clean)["content"] == "nothing here"


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        (RedactionRule(field="turns.content", action="mask"), "no event type 'turns'"),
        (RedactionRule(field="turn.text", action="mask"), "turn has no field 'text'"),
        (RedactionRule(field="*.nothing", action="mask"), "no event type has a field"),
        (RedactionRule(field="turn.role", action="drop"), "cannot be dropped"),
        (
            RedactionRule(field="turn.content", action="mask", where={"speaker": "x"}),
            "does not have",
        ),
    ],
)
def test_a_rule_naming_what_does_not_exist_is_refused_when_the_policy_is_made(
    rule: RedactionRule, says: str
) -> None:
    with pytest.raises(RedactionError, match=says):
        Redaction(rules=(rule,))


def test_a_hash_rule_without_the_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="needs the project's secret"):
        Redaction(rules=(RedactionRule(field="turn.content", action="hash"),))


def test_a_policy_file_reads_its_rules_and_asks_for_the_secret_only_when_a_rule_hashes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(
        'phone_region = "GB"\n[[rule]]\nfield = "*.content"\naction = "mask"\n'
        'patterns = ["email"]\n'
    )

    def no_secret() -> bytes:
        raise AssertionError("the secret was read for a policy that does not hash")

    policy = Redaction.from_file(path, secret=no_secret)
    assert policy.phone_region == "GB" and policy.rules[0].patterns == ("email",)
    path.write_text('[[rule]]\nfield = "turn.content"\naction = "hash"\n')
    assert Redaction.from_file(path, secret=lambda: SECRET).secret is not None
    path.write_text('[[rule]]\nfield = "turn.content"\naction = "blur"\n')
    with pytest.raises(RedactionError, match=f"{path} is not valid"):
        Redaction.from_file(path)


def test_the_recorder_seals_redacted_events_into_a_chain_that_verifies(tmp_path: Path) -> None:
    policy = Redaction(
        rules=(
            RedactionRule(field="*.content", action="mask"),
            RedactionRule(field="tool_call.arguments", action="hash"),
        ),
        secret=SECRET,
    )
    spool = tmp_path / "spool"
    recorder = Recorder(None, spool_dir=spool, spool_after_s=0.0, redaction=policy)
    with recorder.session("support", session_id="redacted-1") as s:
        s.turn("user", "I am jane@example.com, call +1 415 555 2671")
        call = s.tool_call("lookup", {"email": "jane@example.com"})
        s.tool_result(call, "found jane@example.com")
    recorder.close(5)
    values = drain(spool)
    recorded = b"".join(values)  # (hex ids and times may hold "555": the number is looked for)
    assert b"jane@example.com" not in recorded and b"415 555 2671" not in recorded
    payloads = [orjson.loads(v)["payload"] for v in values]
    assert payloads[1]["content"] == "I am [email], call [phone]"
    assert payloads[2]["arguments"]["email"].startswith("hmac-sha256:")
    assert payloads[3]["content"] == "found [email]"
    verifier = ChainVerifier()
    for value in values:
        verifier.add(value)
    (report,) = verifier.reports()
    assert report.ok and report.ended


def test_open_recorder_applies_the_settings_policy_with_a_secret_created_0600(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[[rule]]\nfield = "turn.content"\naction = "hash"\n')
    settings = Settings(
        state_dir=tmp_path / "state",
        spool_dir=tmp_path / "spool",
        redaction_policy=policy,
        bootstrap="",
    )
    recorder = open_recorder(settings, connection=None)
    with recorder.session("t", session_id="redacted-2") as s:
        s.turn("user", "secret text")
    recorder.close(5)
    secret_file = tmp_path / "state" / "keys" / "redaction.secret"
    assert os.stat(secret_file).st_mode & 0o777 == 0o600
    secret = secret_file.read_bytes()
    expected = hmac.new(secret, b"secret text", hashlib.sha256).hexdigest()
    contents = [orjson.loads(v)["payload"].get("content") for v in drain(tmp_path / "spool")]
    assert f"hmac-sha256:{expected}" in contents and "secret text" not in contents
