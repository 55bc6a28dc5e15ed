"""A key-encryption key from a provider (ROLLTAPE_KEK_PROVIDER) instead of the KEK file: what
it returns is checked, and what goes wrong says which provider and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from rolltape.infra.keys import KekStore, SecretFileError, kek_available, key_encryption_key
from rolltape.infra.settings import Settings
from rolltape.schemas.privacy import KeyEncryptionKey
from tests.support.kek_vault import Vault

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


VAULT = Vault(SECRET)


def test_a_provider_that_rotates__serves_each_version_through_the_store(tmp_path: Path) -> None:
    settings = _settings(tmp_path, f"{HERE}:VAULT")
    assert key_encryption_key(settings) == KeyEncryptionKey(SECRET)  # its current()
    store = KekStore(settings)
    old = store.current()
    new = store.stage()
    assert new != old and store.stage() == new  # the same staged key until promoted
    assert store.retired() is None
    store.promote(old)
    assert key_encryption_key(settings) == new and store.retired() == old
    store.destroy_retired()
    assert store.retired() is None and VAULT.destroyed == [SECRET]


def test_a_provider_function__cannot_be_rotated_and_says_what_a_rotating_one_has(
    tmp_path: Path,
) -> None:
    with pytest.raises(SecretFileError, match="cannot rotate it: it has no current, stage"):
        KekStore(_settings(tmp_path, f"{HERE}:provide"))


def test_the_kek_file_store__stages_promotes_and_destroys_beside_the_file(tmp_path: Path) -> None:
    settings = _settings(tmp_path, None)
    first = key_encryption_key(settings)  # created on first use
    store = KekStore(settings)
    staged = store.stage()
    assert (tmp_path / "keys" / "kek.bin.next").exists() and store.retired() is None
    store.promote(first)
    assert key_encryption_key(settings) == staged and store.retired() == first
    store.destroy_retired()
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == ["kek.bin"]
