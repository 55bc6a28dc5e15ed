"""Signing and checking the judge's checkpoints: Ed25519 keys, tree-head signatures, and the
log tree that a reader rebuilds from a log's checkpoints (see `rolltape.schemas._checkpoint` for
the records themselves)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from rolltape.schemas._checkpoint import ChainHeadLeaf, Checkpoint, TreeHead
from rolltape.schemas._erasure import Erasure
from rolltape.schemas.trust._merkle import Frontier, ProofTree, tree_root, verify_consistency


def key_id(public_key: Ed25519PublicKey) -> str:
    """The first 16 hex digits of SHA-256 over the raw public key (names a key in tree heads)."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def load_public_key(pem: bytes) -> Ed25519PublicKey:
    """An Ed25519 public key from PEM (SubjectPublicKeyInfo); ValueError for anything else."""
    try:
        key = serialization.load_pem_public_key(pem)
    except UnsupportedAlgorithm as exc:
        raise ValueError(f"the public key's algorithm is not supported: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("the public key is not an Ed25519 key")
    return key


def load_private_key(pem: bytes) -> Ed25519PrivateKey:
    """An unencrypted Ed25519 private key from PEM (PKCS #8); ValueError for anything else."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError as exc:  # the PEM is encrypted
        raise ValueError(
            f"the private key is encrypted; rolltape reads unencrypted keys ({exc})"
        ) from exc
    except UnsupportedAlgorithm as exc:
        raise ValueError(f"the private key's algorithm is not supported: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("the private key is not an Ed25519 key")
    return key


def sign_tree_head(private_key: Ed25519PrivateKey, head: TreeHead) -> str:
    """The judge's Ed25519 signature of the tree head's signed bytes, as hex."""
    return private_key.sign(head.signed_bytes()).hex()


def tree_head_signed_by(public_key: Ed25519PublicKey, head: TreeHead, signature: str) -> bool:
    """Whether `signature` is the key's signature of `head` (and the head names that key)."""
    if head.key_id != key_id(public_key):
        return False
    try:
        public_key.verify(bytes.fromhex(signature), head.signed_bytes())
    except (InvalidSignature, ValueError):
        return False
    return True


def sign_erasure(private_key: Ed25519PrivateKey, erasure: Erasure) -> Erasure:
    """The erasure with the judge's Ed25519 signature of its signed bytes."""
    return erasure.model_copy(update={"signature": private_key.sign(erasure.signed_bytes()).hex()})


def erasure_signed_by(public_key: Ed25519PublicKey, erasure: Erasure) -> bool:
    """Whether the erasure carries the key's signature of what it says (and names that key)."""
    if erasure.key_id != key_id(public_key):
        return False
    try:
        public_key.verify(bytes.fromhex(erasure.signature), erasure.signed_bytes())
    except (InvalidSignature, ValueError):
        return False
    return True


def consistency_from_frontier(old: Frontier, new_leaves: Sequence[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) for the tree of `old` extended by `new_leaves`, from the old frontier alone.

    Every hash of a consistency proof covers either a complete subtree on the old tree's right
    edge (a frontier node) or leaves appended since, so the writer need not keep old leaves.
    """
    m, n = old.size, old.size + len(new_leaves)
    if m == 0 or m == n:
        return []
    nodes: dict[tuple[int, int], bytes] = {}
    start = 0
    for bit in range(m.bit_length() - 1, -1, -1):
        if m >> bit & 1:
            nodes[(start, start + (1 << bit))] = old.nodes[len(nodes)]
            start += 1 << bit

    def subtree(lo: int, hi: int) -> bytes:
        if (lo, hi) in nodes:
            return nodes[(lo, hi)]
        if lo >= m:
            return tree_root(new_leaves[lo - m : hi - m])
        raise AssertionError(f"subtree [{lo}, {hi}) is neither old frontier nor new")

    def proof(lo: int, hi: int, whole: bool) -> list[bytes]:
        size, old_part = hi - lo, m - lo
        if old_part == size:
            return [] if whole else [subtree(lo, hi)]
        k = 1 << ((size - 1).bit_length() - 1)
        if old_part <= k:
            return [*proof(lo, lo + k, whole), subtree(lo + k, hi)]
        return [*proof(lo + k, hi, False), subtree(lo, lo + k)]

    return proof(0, n, True)


class LogTree:
    """One log's tree rebuilt from its checkpoints, fed in chain order, checking each: the
    signature (when a public key is given), that it continues the previous tree head, that its
    consistency proof holds, and that its root is the root of the leaves so far."""

    def __init__(self, log: str, public_key: Ed25519PublicKey | None = None) -> None:
        self.log = log
        self.public_key = public_key
        self.leaves: list[ChainHeadLeaf] = []
        self.hashes: list[bytes] = []
        self.heads: list[tuple[TreeHead, str]] = []
        """Every (tree head, signature) that checked out, in order."""
        self._index: dict[tuple[str, str, int, str], int] = {}
        self._proofs: dict[int, ProofTree] = {}
        self._frontier = Frontier()

    def add(self, checkpoint: Checkpoint) -> list[str]:
        """Append a checkpoint; returns what is wrong with it (nothing: it is good)."""
        head = checkpoint.tree_head
        where = f"checkpoint of {self.log} at tree size {head.tree_size}"
        if head.log != self.log:
            return [f"{where} names log {head.log!r}"]
        if checkpoint.previous_size != len(self.leaves):
            return [
                f"{where} continues a tree of {checkpoint.previous_size} leaves, but the log "
                f"has {len(self.leaves)} (a checkpoint is missing or repeated)"
            ]
        if head.tree_size != checkpoint.previous_size + len(checkpoint.leaves):
            return [f"{where} adds {len(checkpoint.leaves)} leaves to {checkpoint.previous_size}"]
        problems: list[str] = []
        if self.public_key is not None and not tree_head_signed_by(
            self.public_key, head, checkpoint.signature
        ):
            problems.append(f"{where}: the signature is not the judge key's ({head.key_id})")
        new_hashes = [leaf.leaf_hash() for leaf in checkpoint.leaves]
        frontier = Frontier(self._frontier.size, self._frontier.nodes)
        for digest in new_hashes:
            frontier.append(digest)
        if frontier.root().hex() != head.root_hash:
            problems.append(f"{where}: the root is not the root of the log's leaves")
        if self.heads and self.heads[-1][0].tree_size > 0:
            previous = self.heads[-1][0]
            proof = [bytes.fromhex(h) for h in checkpoint.consistency]
            if not verify_consistency(
                previous.tree_size,
                head.tree_size,
                bytes.fromhex(previous.root_hash),
                bytes.fromhex(head.root_hash),
                proof,
            ):
                problems.append(f"{where}: it is not consistent with the tree head before it")
        if problems:
            return problems
        self._frontier = frontier
        for leaf, digest in zip(checkpoint.leaves, new_hashes, strict=True):
            self._index.setdefault(
                (leaf.stream, leaf.session_id, leaf.seq, leaf.hash), len(self.hashes)
            )
            self.leaves.append(leaf)
            self.hashes.append(digest)
        self.heads.append((head, checkpoint.signature))
        return []

    def find(self, leaf: ChainHeadLeaf) -> int | None:
        """The index of the first leaf equal to `leaf`."""
        return self._index.get((leaf.stream, leaf.session_id, leaf.seq, leaf.hash))

    def inclusion(self, index: int, tree_size: int) -> list[bytes]:
        """The audit path of leaf `index` in the tree of the first `tree_size` leaves."""
        proofs = self._proofs.get(tree_size)
        if proofs is None:
            proofs = self._proofs[tree_size] = ProofTree(self.hashes[:tree_size])
        return proofs.inclusion(index)
