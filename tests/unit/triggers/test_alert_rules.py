"""Alert rules are read whole or refused whole, each problem named; matching is by status and flow glob."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fluksio import Settings
from fluksio.errors import ConfigError
from fluksio.triggers.alerts import load_alert_rules
from fluksio.triggers.message import encode, signature, slack_text
from fluksio.triggers.rules import load_rules, parse_rules, rules_path

REPO = Path(__file__).resolve().parents[3]


def test_the_example_file_is_valid() -> None:
    rules = load_rules(REPO / "config" / "alerts.example.json")
    assert rules and all(rule.name for rule in rules)


def test_a_rule_matches_its_statuses_and_flow_glob() -> None:
    [rule] = parse_rules([{"name": "n", "statuses": ["error"], "flow": "train*",
                           "webhook": {"url": "https://hooks.example.org/x"}}])
    assert rule.matches("train_big", "error")
    assert not rule.matches("train_big", "ok") and not rule.matches("etl", "error")
    [default] = parse_rules([{"name": "d", "email": {"to": ["ops@example.org"]}}])
    assert default.statuses == ("error", "abandoned") and default.matches("anything", "abandoned")


@pytest.mark.parametrize(("data", "message"), [
    ({"name": "x"}, "must be a JSON list of rules"),
    ([3], "rule 0: must be an object"),
    ([{"name": "a", "webhook": {"url": "ftp://x"}}], "webhook.url: 'ftp://x' is not an http(s) URL"),
    ([{"name": "a", "webhook": {"url": "https://x", "secrt": "s"}}], "did you mean 'secret'"),
    ([{"name": "a", "webhook": {"url": "https://x/a b"}}], "has a space or a control character in it"),
    ([{"name": "a", "statuses": ["failed"], "webhook": {"url": "https://x"}}], "'failed' is not a status"),
    ([{"name": "a", "statuses": [], "webhook": {"url": "https://x"}}], "statuses"),
    ([{"name": "a"}], "exactly one target"),
    ([{"name": "a", "webhook": {"url": "https://x"}, "email": {"to": ["a@b.org"]}}], "exactly one target"),
    ([{"name": "a", "email": {"to": ["not-an-address"]}}], "'not-an-address' is not an email address"),
    ([{"name": "a", "webhook": {"url": "https://x", "format": "teams"}}], "webhook.format"),
    ([{"name": "a b", "webhook": {"url": "https://x"}}], "is not a rule name"),
    ([{"name": "a", "webhook": {"url": "https://x"}}, {"name": "a", "webhook": {"url": "https://y"}}],
     "rule 1 ('a'): name: another rule has the same name"),
])
def test_a_bad_rule_is_refused_naming_the_rule_and_field(data: object, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_rules(data)
    assert message in str(caught.value)


def test_a_file_that_is_not_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "alerts.json"
    path.write_text('[{"name": "a",\n "webhook": }]')
    with pytest.raises(ConfigError, match=r"is not valid JSON: .* at line 2"):
        load_rules(path)


def test_the_default_file_is_used_only_when_present(tmp_path: Path) -> None:
    assert rules_path(None, cwd=tmp_path) is None
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "alerts.json").write_text("[]")
    assert rules_path(None, cwd=tmp_path) == tmp_path / "config" / "alerts.json"
    assert rules_path(Path("elsewhere.json"), cwd=tmp_path) == Path("elsewhere.json")


def test_an_email_rule_needs_an_smtp_server(tmp_path: Path) -> None:
    path = tmp_path / "alerts.json"
    path.write_text(json.dumps([{"name": "mail", "email": {"to": ["ops@example.org"]}}]))
    with pytest.raises(ConfigError, match="set FLUKSIO_SMTP_HOST"):
        load_alert_rules(Settings(alerts=path))
    assert load_alert_rules(Settings(alerts=path, smtp_host="mail.example.org"))[0].name == "mail"


def test_the_signature_is_the_hmac_of_the_exact_body() -> None:
    import hashlib
    import hmac

    body = {"run_id": "R", "flow": "f", "status": "error", "duration_s": 1.0, "reason": "boom", "url": "http://u/runs/R"}
    data = encode(body, "json")
    assert json.loads(data) == body
    assert signature("s3cret", data) == "sha256=" + hmac.new(b"s3cret", data, hashlib.sha256).hexdigest()
    slack = json.loads(encode(body, "slack"))
    assert list(slack) == ["text"] and slack["text"] == slack_text(body)
    assert "run R of flow f ended error after 1.0 s" in slack["text"] and "boom" in slack["text"]
