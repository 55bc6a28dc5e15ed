"""The keys rolltape keeps: the judge's Ed25519 key pair on disk (created once, private half
0600, public half shareable), the key-encryption key (a file, or a provider) and where its
rotation keeps its versions (`KekStore`), and the redaction secret.

The judge's private key signs the worker's checkpoints; the public key (PEM, with its key id) is
what a third party needs to verify an export offline (`rolltape dataset verify DIR --public-key
FILE`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

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
    return key_encryption_key_file(kek_path(settings), create=create)


def kek_available(settings: Settings) -> bool:
    """Whether this machine has a key-encryption key to open content with (a provider, or the
    file): a reader without one leaves sealed sessions out as `key unavailable`."""
    return settings.kek_provider is not None or kek_path(settings).exists()


def _provided_kek(spec: str) -> KeyEncryptionKey:
    """The KEK a provider returns (bytes, or a KeyEncryptionKey), checked: a function, or an
    object whose `current()` serves it (a provider that can rotate: `KekRotation`)."""
    provider = load_object(spec, "key-encryption key provider", what="function")
    current = getattr(provider, "current", provider)
    if not callable(current):
        raise SecretFileError(f"the key-encryption key provider {spec!r} is not a function")
    kek = _called(spec, current, "")
    if kek is None:
        raise SecretFileError(f"the key-encryption key provider {spec!r} returned no key")
    return kek


def _called(spec: str, method: Callable[[], object], name: str) -> KeyEncryptionKey | None:
    """What a provider's method returned, as a KEK (None stays None), or SecretFileError
    saying which provider and why."""
    what = f"the key-encryption key provider {spec!r}" + (f" ({name})" if name else "")
    try:
        kek = method()
    except Exception as exc:
        raise SecretFileError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
    if kek is None or isinstance(kek, KeyEncryptionKey):
        return kek
    if not isinstance(kek, bytes | bytearray) or len(kek) != 32:
        got = f"{len(kek)} bytes" if isinstance(kek, bytes | bytearray) else type(kek).__name__
        raise SecretFileError(f"{what} returned {got}, not 32 bytes")
    return KeyEncryptionKey(bytes(kek))


class KekRotation(Protocol):
    """What a provider (ROLLTAPE_KEK_PROVIDER naming an object, not a function) implements for
    `rolltape privacy rotate-kek` to rotate the KEK it serves. Each method may return bytes or a
    KeyEncryptionKey; a key service keeps the three versions it names (docs/privacy.md)."""

    def current(self) -> bytes:
        """The KEK recorders wrap new data keys under (and readers unwrap with)."""
        ...

    def stage(self) -> bytes:
        """The next KEK: made on the first call, the same one until `promote` (a rotation cut
        short goes on with it)."""
        ...

    def promote(self) -> None:
        """The staged KEK becomes current; the current one is kept as retired."""
        ...

    def retired(self) -> bytes | None:
        """The KEK `promote` retired, until `destroy_retired`; None when there is none."""
        ...

    def destroy_retired(self) -> None:
        """Destroy the retired KEK, everywhere the service keeps it."""
        ...


class KekStore:
    """Where the KEK and its rotation's two other versions are kept: the KEK file with `.next`
    and `.retired` beside it, or a provider that implements `KekRotation`. The one interface
    `rotate-kek` works through."""

    def __init__(self, settings: Settings) -> None:
        self._spec = settings.kek_provider
        self._path = kek_path(settings)
        self.lock_path = self._path.with_name(self._path.name + ".rotating")
        """One rotation at a time on this machine (a provider's service may enforce more)."""
        self._provider: object = None
        if self._spec is not None:
            self._provider = load_object(self._spec, "key-encryption key provider")
            missing = [
                m
                for m in ("current", "stage", "promote", "retired", "destroy_retired")
                if not callable(getattr(self._provider, m, None))
            ]
            if missing:
                raise SecretFileError(
                    f"the key-encryption key provider {self._spec!r} serves a KEK but cannot "
                    f"rotate it: it has no {', '.join(missing)} (a provider that rotates is an "
                    "object with current, stage, promote, retired and destroy_retired: "
                    "docs/privacy.md); rotate it where it is kept"
                )
        self.name = self._spec or str(self._path)

    def _call(self, name: str) -> KeyEncryptionKey | None:
        assert self._spec is not None
        return _called(self._spec, getattr(self._provider, name), name)

    def current(self) -> KeyEncryptionKey:
        if self._spec is None:
            return key_encryption_key_file(self._path, create=False)
        kek = self._call("current")
        if kek is None:
            raise SecretFileError(f"the key-encryption key provider {self._spec!r} has no key")
        return kek

    def stage(self) -> KeyEncryptionKey:
        if self._spec is None:
            successor = self._path.with_name(self._path.name + ".next")
            return KeyEncryptionKey(
                _secret_file(successor, "next key-encryption key", 32, exact=True)
            )
        kek = self._call("stage")
        if kek is None:
            raise SecretFileError(f"the key-encryption key provider {self._spec!r} staged none")
        return kek

    def promote(self, old: KeyEncryptionKey) -> None:
        """The staged KEK in `old`'s place, `old` kept as retired."""
        if self._spec is None:
            write_secret_file(self._retired_path, old.secret)
            os.replace(self._path.with_name(self._path.name + ".next"), self._path)
        else:
            self._call("promote")

    def retired(self) -> KeyEncryptionKey | None:
        if self._spec is None:
            if not self._retired_path.exists():
                return None
            return KeyEncryptionKey(
                _secret_file(
                    self._retired_path, "retired key-encryption key", 32, exact=True, create=False
                )
            )
        return self._call("retired")

    def destroy_retired(self) -> None:
        if self._spec is None:
            _destroy(self._retired_path)
        else:
            self._call("destroy_retired")

    @property
    def _retired_path(self) -> Path:
        return self._path.with_name(self._path.name + ".retired")


def key_encryption_key_file(path: Path, *, create: bool) -> KeyEncryptionKey:
    return KeyEncryptionKey(_secret_file(path, "key-encryption key", 32, exact=True, create=create))


def _destroy(path: Path) -> None:
    """Overwrite a retired KEK's bytes, then remove the file."""
    with open(path, "r+b") as f:
        f.write(b"\x00" * path.stat().st_size)
        f.flush()
        os.fsync(f.fileno())
    path.unlink()
