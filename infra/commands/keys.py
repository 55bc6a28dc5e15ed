"""`rolltape keys init | show | export` wiring: the judge's key pair (infra/keys.py) created, shown
or its public half written out, each answered as a result the CLI prints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rolltape.infra.keys import judge_key
from rolltape.infra.settings import Settings


@dataclass(frozen=True)
class CreatedKey:
    """The judge's key pair just made: its id and its two files."""

    key_id: str
    private: Path
    public: Path


@dataclass(frozen=True)
class PublicKey:
    """What a verifier of exports needs: the key id and the public key (PEM), and where the
    private key is kept."""

    key_id: str
    pem: str
    path: Path


def create_judge_key(settings: Settings, *, replace: bool = False) -> CreatedKey:
    """Create the judge's key pair (replacing an existing one only when `replace`)."""
    key = judge_key(settings)
    kid = key.create(replace=replace)
    return CreatedKey(kid, key.path, key.public_path)


def show_judge_key(settings: Settings) -> PublicKey:
    """The judge's key id and public key."""
    key = judge_key(settings)
    kid, pem = key.key_id(), key.public_pem().decode()
    return PublicKey(kid, pem, key.path)


def export_judge_key(settings: Settings, path: Path) -> str:
    """Write the judge's public key (PEM) to `path`; its key id."""
    key = judge_key(settings)
    path.write_bytes(key.public_pem())
    return key.key_id()
