"""``Secret`` inputs: a flow declares them, a submit gives the name (never the value), and what is journaled
is the name alone."""

from __future__ import annotations

import pickle

import pytest

from fluksio import Flow, RunRejected, Secret
from fluksio.cache.keys import canonical
from fluksio.runs.submit import validate_params

VALUE = "hf_secret_Value_123"


def flow() -> Flow:
    fetch = Flow("fetch", inputs={"token": Secret, "url": str, "backup": (Secret, "BACKUP_TOKEN")})

    @fetch.node(provides="status")
    def get(token: Secret, url: str, backup: Secret) -> int:
        return 200

    return fetch


def test_a_secret_shows_its_name_only_and_cannot_be_pickled() -> None:
    secret = Secret("HF_TOKEN", VALUE)
    assert secret.value == VALUE
    assert repr(secret) == str(secret) == f"{secret}" == "Secret('HF_TOKEN')"
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(secret)
    with pytest.raises(ValueError, match="has no value here"):
        _ = Secret("HF_TOKEN").value


def test_the_submit_journals_the_names_and_the_defaults_name() -> None:
    params = validate_params(flow(), {"token": "HF_TOKEN", "url": "https://x"}, None)
    assert params == {"token": "HF_TOKEN", "url": "https://x", "backup": "BACKUP_TOKEN"}
    canonical(params)  # JSON as any other parameter: what cache keys are made of
    assert validate_params(flow(), {"token": Secret("OTHER"), "url": "u"}, None)["token"] == "OTHER"


@pytest.mark.parametrize("given", [VALUE, "hf token", "", 42, {"value": VALUE}])
def test_what_is_not_a_name_is_refused_without_being_repeated(given: object) -> None:
    with pytest.raises(RunRejected) as refused:
        validate_params(flow(), {"token": given, "url": "u"}, None)
    message = str(refused.value)
    assert "input 'token' of flow 'fetch' is a Secret: give the secret's name" in message
    assert VALUE not in message and "like HF_TOKEN" in message


def test_a_missing_secret_input_says_how_to_give_it() -> None:
    with pytest.raises(RunRejected, match=r"needs input 'token' \(Secret\); give the secret's name"):
        validate_params(flow(), {"url": "u"}, None)


def test_a_secret_name_must_be_capitals_digits_and_underscores() -> None:
    with pytest.raises(ValueError, match="capital letters"):
        Secret("lower")
    assert Secret("A_1").name == "A_1"
