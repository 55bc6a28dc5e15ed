"""A key service that rotates the key-encryption key it serves, in memory: what a provider that
names an object (ROLLTAPE_KEK_PROVIDER=module:OBJECT) implements
(`rolltape.infra.keys.KekRotation`)."""

from __future__ import annotations

import os


class Vault:
    """A key service that rotates: its versions in memory (`KekRotation`)."""

    def __init__(self, first: bytes) -> None:
        self.keys: dict[str, bytes | None] = {"current": first, "staged": None, "retired": None}
        self.destroyed: list[bytes] = []

    def current(self) -> bytes:
        return self.keys["current"] or b""

    def stage(self) -> bytes:
        if self.keys["staged"] is None:
            self.keys["staged"] = os.urandom(32)
        return self.keys["staged"]

    def promote(self) -> None:
        k = self.keys
        k["retired"], k["current"], k["staged"] = k["current"], k["staged"], None

    def retired(self) -> bytes | None:
        return self.keys["retired"]

    def destroy_retired(self) -> None:
        retired, self.keys["retired"] = self.keys["retired"], None
        if retired is not None:
            self.destroyed.append(retired)
