"""A key-encryption key from a provider (ROLLTAPE_KEK_PROVIDER) instead of the KEK file: what
it returns is checked, and what goes wrong says which provider and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from rolltape.infra.keys import SecretFileError, kek_available, key_encryption_key
from rolltape.infra.settings import Settings
from rolltape.schemas.privacy import KeyEncryptionKey

SECRET = bytes(range(32))
HERE = "tests.unit.test_kek_provider"


def provide() -> bytes:
    return SECRET


def provide_short() -> bytes:
    return SECRET[:31]


def provide_failing() -> bytes:
    raise ConnectionError("the key service is away")


def _settings(tmp_path: Path, provider: str | None) -> Settings:
    return Settings(state_dir=tmp_path, kek_provider=provider)


def test_a_provider_gives_the_kek_and_no_file_is_made(tmp_path: Path) -> None:
    settings = _settings(tmp_path, f"{HERE}:provide")
    assert kek_available(settings)
    assert key_encryption_key(settings) == KeyEncryptionKey(SECRET)
    assert not (tmp_path / "keys").exists()
    assert not kek_available(_settings(tmp_path, None))  # no provider, no file


@pytest.mark.parametrize(
    ("provider", "said"),
    [
        ("provide_short", "returned 31 bytes, not 32"),
        ("provide_failing", "failed: ConnectionError: the key service is away"),
        ("SECRET", "is not a function"),
    ],
)
def test_a_provider_that_gives_no_kek_says_which_and_why(
    tmp_path: Path, provider: str, said: str
) -> None:
    with pytest.raises(SecretFileError, match=said):
        key_encryption_key(_settings(tmp_path, f"{HERE}:{provider}"))
