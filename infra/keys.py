"""The judge's Ed25519 key pair on disk: created once, private half 0600, public half shareable.

The private key signs the worker's checkpoints; the public key (PEM, with its key id) is what a
third party needs to verify an export offline (`rolltape verify-export DIR --public-key FILE`).
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rolltape.infra._errors import InfraError
from rolltape.infra.settings import Settings
from rolltape.schemas.plugins import load_object
from rolltape.schemas.privacy import KeyEncryptionKey
from rolltape.schemas.trust import key_id, load_private_key


class JudgeKeyError(InfraError):
    """The judge's key cannot be created or read; the message says what to do."""


class JudgeKey:
    """The key pair at `path` (private, PEM PKCS #8) and `public_path` (PEM SubjectPublicKeyInfo)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.public_path = path.with_name(path.name.removesuffix(".pem") + ".pub.pem")

    def exists(self) -> bool:
        return self.path.exists()

    def create(self, *, replace: bool = False) -> str:
        """Generate a new pair and return its key id. Refuses to replace an existing key unless
        asked: checkpoints signed with it could no longer be verified with the new one."""
        if self.path.exists() and not replace:
            raise JudgeKeyError(
                f"a judge key exists already at {self.path} (key id {self.key_id()}); replacing "
                "it makes earlier checkpoints unverifiable with the new public key: pass "
                "--replace only if that is what you want, and keep the old public key"
            )
        key = Ed25519PrivateKey.generate()
        private = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # 0600 from creation on
        with os.fdopen(fd, "wb") as f:
            f.write(private)
        os.replace(tmp, self.path)
        self.public_path.write_bytes(self._public_pem(key))
        return key_id(key.public_key())

    def private_key(self) -> Ed25519PrivateKey:
        try:
            return load_private_key(self.path.read_bytes())
        except FileNotFoundError as exc:
            raise JudgeKeyError(
                f"no judge key at {self.path}: create one with `rolltape keys init` "
                "(`rolltape broker up` and `rolltape demo` create it when there is none)"
            ) from exc
        except ValueError as exc:
            raise JudgeKeyError(f"{self.path} holds no Ed25519 private key: {exc}") from exc

    def public_pem(self) -> bytes:
        return self._public_pem(self.private_key())

    def key_id(self) -> str:
        return key_id(self.private_key().public_key())

    @staticmethod
    def _public_pem(key: Ed25519PrivateKey) -> bytes:
        return key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


def judge_key(settings: Settings) -> JudgeKey:
    """ROLLTAPE_JUDGE_KEY_FILE, else `<state dir>/keys/judge.ed25519.pem`."""
    path = settings.judge_key_file or settings.state_dir / "keys" / "judge.ed25519.pem"
    return JudgeKey(path)


class SecretFileError(InfraError):
    """A secret file (the redaction secret, the key-encryption key) cannot be created or read,
    or others may read it."""


def write_secret_file(path: Path, data: bytes) -> None:
    """`data` into `path`, 0600 from creation on, whole or not at all (a temporary file, synced,
    then renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _secret_file(path: Path, what: str, size: int, *, exact: bool, create: bool = True) -> bytes:
    """The bytes of a 0600 secret file, created with `size` random bytes on first use (unless
    `create` is false: then a missing file is an error)."""
    try:
        if not path.exists() and not create:
            raise SecretFileError(
                f"no {what} at {path}: copy it from the machine that records, or point the "
                "setting at it"
            )
        if not path.exists():
            write_secret_file(path, os.urandom(size))
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            raise SecretFileError(
                f"the {what} {path} is readable by others (mode {mode:o}); `chmod 600 {path}`, "
                "and make a new one if others may have read it"
            )
        secret = path.read_bytes()
    except OSError as exc:
        raise SecretFileError(f"cannot read or create the {what} {path}: {exc}") from exc
    if (exact and len(secret) != size) or len(secret) < min(size, 16):
        raise SecretFileError(
            f"the {what} {path} holds {len(secret)} bytes, not {size}: it is not a file rolltape "
            "wrote; point the setting at the right file"
        )
    return secret


def redaction_secret(settings: Settings) -> bytes:
    """The secret that keys a redaction policy's hashes, created (32 random bytes, 0600) on
    first use; a secret file that is not 0600 is refused rather than used."""
    path = settings.redaction_secret_file or settings.state_dir / "keys" / "redaction.secret"
    return _secret_file(path, "redaction secret", 32, exact=False)


def kek_path(settings: Settings) -> Path:
    """ROLLTAPE_KEK_FILE, else `<state dir>/keys/kek.bin`."""
    return settings.kek_file or settings.state_dir / "keys" / "kek.bin"


def key_encryption_key(settings: Settings, *, create: bool = True) -> KeyEncryptionKey:
    """The key-encryption key that wraps data keys: from the provider ROLLTAPE_KEK_PROVIDER
    names where one is set, else from ROLLTAPE_KEK_FILE, created (32 random bytes, 0600) on
    first use by a recorder; a reader (`create=False`) never makes one, since a new key opens
    nothing. Losing it makes every subject session's content unreadable: back it up as you back
    up the broker's data."""
    if settings.kek_provider is not None:
        return _provided_kek(settings.kek_provider)
    return KeyEncryptionKey(
        _secret_file(kek_path(settings), "key-encryption key", 32, exact=True, create=create)
    )


def kek_available(settings: Settings) -> bool:
    """Whether this machine has a key-encryption key to open content with (a provider, or the
    file): a reader without one leaves sealed sessions out as `key unavailable`."""
    return settings.kek_provider is not None or kek_path(settings).exists()


def _provided_kek(spec: str) -> KeyEncryptionKey:
    """The KEK a provider function returns (bytes, or a KeyEncryptionKey), checked."""
    provider = load_object(spec, "key-encryption key provider", what="function")
    if not callable(provider):
        raise SecretFileError(f"the key-encryption key provider {spec!r} is not a function")
    try:
        kek = provider()
    except Exception as exc:
        raise SecretFileError(
            f"the key-encryption key provider {spec!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(kek, KeyEncryptionKey):
        return kek
    if not isinstance(kek, bytes | bytearray) or len(kek) != 32:
        got = f"{len(kek)} bytes" if isinstance(kek, bytes | bytearray) else type(kek).__name__
        raise SecretFileError(
            f"the key-encryption key provider {spec!r} returned {got}, not 32 bytes"
        )
    return KeyEncryptionKey(bytes(kek))
