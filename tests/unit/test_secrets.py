"""Secrets (model API keys, SASL passwords) never show in a repr, a str or an ordinary dump;
they are unwrapped only where a client is built, or where a child process must be handed them."""

from __future__ import annotations

import json

import pytest

from rolltape.infra.broker._principals import Principal
from rolltape.infra.settings import Settings
from rolltape.schemas import Role
from rolltape.schemas.clients import KafkaConnection, ModelEndpoint
from rolltape.schemas.clients._endpoints import REVEAL_SECRETS

API_KEY = "sk-live-0123456789abcdef"
PASSWORD = "scram-password-fedcba9876543210"


def _endpoint() -> ModelEndpoint:
    return ModelEndpoint(base_url="http://models.example:8000/v1", model="grader", api_key=API_KEY)


def test_model_endpoint__repr_and_str_never_show_the_api_key() -> None:
    endpoint = _endpoint()
    for text in (repr(endpoint), str(endpoint), f"{endpoint}", f"{endpoint!r}"):
        assert API_KEY not in text
        assert "**********" in text


def test_model_endpoint__ordinary_dumps_mask_the_api_key() -> None:
    endpoint = _endpoint()
    assert API_KEY not in endpoint.model_dump_json()
    assert API_KEY not in json.dumps(endpoint.model_dump(mode="json"))
    assert API_KEY not in repr(endpoint.model_dump())


def test_model_endpoint__to_config_carries_the_key_and_reads_back_equal() -> None:
    endpoint = _endpoint()
    config = endpoint.to_config()
    assert config["api_key"] == API_KEY
    # The JSON form is what ROLLTAPE_MODELS takes: a child process gets the same endpoint.
    assert ModelEndpoint.model_validate_json(json.dumps(config)) == endpoint


def test_model_endpoint__default_key_is_the_placeholder_local_servers_ignore() -> None:
    endpoint = ModelEndpoint(base_url="http://localhost:8000/v1", model="m")
    assert endpoint.api_key.get_secret_value() == "not-needed"


def test_model_endpoint__openai_clients_get_the_real_key() -> None:
    pytest.importorskip("openai")
    endpoint = _endpoint()
    assert endpoint.client().api_key == API_KEY
    assert endpoint.async_client().api_key == API_KEY


def test_settings__repr_and_str_never_show_the_password_or_an_api_key() -> None:
    settings = Settings(
        bootstrap="kafka.example:9092",
        sasl_username="agent",
        sasl_password=PASSWORD,
        models={"grader": _endpoint()},
    )
    for text in (repr(settings), str(settings), settings.model_dump_json()):
        assert PASSWORD not in text
        assert API_KEY not in text


def test_settings__models_read_from_the_environment_keep_the_key_out_of_the_repr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ROLLTAPE_MODELS", json.dumps({"grader": _endpoint().to_config()}))
    settings = Settings()
    assert settings.models["grader"].api_key.get_secret_value() == API_KEY
    assert API_KEY not in repr(settings)


def test_settings__dumped_under_the_reveal_context_carries_the_endpoint_keys() -> None:
    settings = Settings(models={"grader": _endpoint()})
    dumped = settings.model_dump(mode="json", context=REVEAL_SECRETS)
    assert dumped["models"]["grader"]["api_key"] == API_KEY


def test_settings__child_env_hands_the_password_itself_to_a_child() -> None:
    settings = Settings(
        bootstrap="kafka.example:9092",
        sasl_username="agent",
        sasl_password=PASSWORD,
    )
    assert settings.child_env()["ROLLTAPE_SASL_PASSWORD"] == PASSWORD


def test_kafka_connection_and_principal__reprs_never_show_the_password() -> None:
    connection = KafkaConnection(
        bootstrap="kafka.example:9092",
        security_protocol="SASL_PLAINTEXT",
        username="agent",
        password=PASSWORD,
    )
    principal = Principal(name="agent", role=Role.AGENT, password=PASSWORD)
    for text in (repr(connection), str(connection), repr(principal), str(principal)):
        assert PASSWORD not in text
