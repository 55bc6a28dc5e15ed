"""The principals a cluster knows and their secrets: one JSON file, readable by its owner only.

Why a file: `broker up` creates the SCRAM credentials when it formats the broker's storage, and
every later process (the SDK in an agent, the worker, an export) must authenticate as the
principal of its role without the secret ever being printed or passed on a command line. The file
is written with 0600 permissions (created that way, never widened) and replaced atomically.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from rolltape.infra.broker._errors import BrokerError
from rolltape.schemas import Role

#: Names of the principals `broker up` provisions: one per role, named after it.
DEFAULT_PRINCIPALS: tuple[Role, ...] = tuple(Role)
PRINCIPAL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class PrincipalError(BrokerError):
    """A principal that does not exist, exists already, or a principals file that is unusable."""


class Principal(BaseModel):
    """A SCRAM user of the cluster and the one role it may act as. The password is a
    `SecretStr`, so it never shows in a repr or a log line; `principal show` prints it on
    purpose."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=PRINCIPAL_NAME_PATTERN)
    role: Role
    password: SecretStr


class _Stored(BaseModel):
    model_config = ConfigDict(extra="forbid")

    principals: dict[str, Principal] = Field(default_factory=dict)
    prefixes: list[str] = Field(default_factory=list)
    """Topic prefixes whose ACLs were provisioned (a principal added later gets them all)."""
    worker_groups: dict[str, str] = Field(default_factory=dict)
    """Topic prefix -> the worker's consumer group (its internal topics start with it)."""


def new_secret() -> str:
    """32 random bytes as hex: no character needs quoting in JAAS or a properties file."""
    return secrets.token_hex(32)


class PrincipalStore:
    """Read and update the principals file at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def exists(self) -> bool:
        return self.path.exists()

    def _load(self) -> _Stored:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return _Stored()
        except OSError as exc:
            raise PrincipalError(f"cannot read the principals file {self.path}: {exc}") from exc
        try:
            return _Stored.model_validate_json(text)
        except ValueError as exc:
            raise PrincipalError(
                f"the principals file {self.path} is not valid ({exc.__class__.__name__}); "
                "restore it from a backup or recreate the broker's state"
            ) from exc

    def _save(self, stored: _Stored) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        data = {
            "principals": {
                name: {
                    "name": p.name,
                    "role": p.role.value,
                    "password": p.password.get_secret_value(),
                }
                for name, p in sorted(stored.principals.items())
            },
            "prefixes": sorted(set(stored.prefixes)),
            "worker_groups": dict(sorted(stored.worker_groups.items())),
        }
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(data, indent=2) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.path)

    # -- reading -------------------------------------------------------------------------------
    def principals(self) -> list[Principal]:
        return sorted(self._load().principals.values(), key=lambda p: (p.role.value, p.name))

    def get(self, name: str) -> Principal:
        found = self._load().principals.get(name)
        if found is None:
            known = ", ".join(sorted(self._load().principals)) or "none"
            raise PrincipalError(
                f"no principal named {name!r} in {self.path} (known: {known}); "
                "add one with `rolltape principal add NAME --role ROLE`"
            )
        return found

    def for_role(self, role: Role) -> Principal | None:
        """The principal a command of `role` authenticates as: the one named after the role,
        else the first of that role by name."""
        principals = self._load().principals
        if role.value in principals and principals[role.value].role == role:
            return principals[role.value]
        of_role = sorted((p for p in principals.values() if p.role == role), key=lambda p: p.name)
        return of_role[0] if of_role else None

    def prefixes(self) -> dict[str, str]:
        """Provisioned topic prefixes and their worker groups."""
        stored = self._load()
        return {p: stored.worker_groups.get(p, f"{p}-worker") for p in sorted(stored.prefixes)}

    # -- writing -------------------------------------------------------------------------------
    def create_defaults(self) -> list[Principal]:
        """One principal per role, named after it, with fresh secrets; existing ones are kept."""
        stored = self._load()
        for role in DEFAULT_PRINCIPALS:
            if role.value not in stored.principals:
                stored.principals[role.value] = Principal(
                    name=role.value, role=role, password=SecretStr(new_secret())
                )
        self._save(stored)
        return self.principals()

    def check_new(self, name: str) -> None:
        """A clear error when `name` is taken."""
        stored = self._load()
        if name in stored.principals:
            raise PrincipalError(
                f"a principal named {name!r} exists already (role "
                f"{stored.principals[name].role.value}); pick another name"
            )

    def add(self, name: str, role: Role, password: str | None = None) -> Principal:
        self.check_new(name)
        stored = self._load()
        principal = Principal(name=name, role=role, password=SecretStr(password or new_secret()))
        stored.principals[name] = principal
        self._save(stored)
        return principal

    def remember_prefix(self, prefix: str, worker_group: str) -> None:
        stored = self._load()
        if prefix in stored.prefixes and stored.worker_groups.get(prefix) == worker_group:
            return
        stored.prefixes.append(prefix)
        stored.worker_groups[prefix] = worker_group
        self._save(stored)
