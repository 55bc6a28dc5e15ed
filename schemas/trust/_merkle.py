"""Merkle trees in the style of Certificate Transparency (RFC 9162 §2.1, as RFC 6962).

    leaf hash   SHA-256(0x00 || leaf bytes)
    node hash   SHA-256(0x01 || left || right)
    root        MTH(D[n]): the empty string's hash for no leaves; for n > 1, with k the largest
                power of two below n, node(MTH(D[0:k]), MTH(D[k:n]))

Proofs are lists of 32-byte hashes, generated and verified by the RFC's algorithms, so a verifier
written in another language checks them without rolltape. `Frontier` keeps what an append-only
writer needs to compute roots (one hash per set bit of the size), so the judge's state stays a
few hundred bytes however many leaves it has appended.

Written here rather than taken from a library: the worker needs that bounded frontier and the
verifier the RFC's wire form, neither of which pymerkle (an independent implementation the tests
check these trees against) offers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    """RFC 9162 leaf hash: sha256(0x00 || data)."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 interior node hash: sha256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly below n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def tree_root(leaves: Sequence[bytes]) -> bytes:
    """MTH over leaf hashes."""
    if not leaves:
        return EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = _split(len(leaves))
    return node_hash(tree_root(leaves[:k]), tree_root(leaves[k:]))


def inclusion_proof(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """PATH(index, D[n]) over leaf hashes: the audit path of leaf `index` in the whole tree."""
    if not 0 <= index < len(leaves):
        raise ValueError(f"leaf {index} is not in a tree of {len(leaves)}")
    if len(leaves) == 1:
        return []
    k = _split(len(leaves))
    if index < k:
        return [*inclusion_proof(leaves[:k], index), tree_root(leaves[k:])]
    return [*inclusion_proof(leaves[k:], index - k), tree_root(leaves[:k])]


class ProofTree:
    """Inclusion proofs of many leaves of one tree: each subtree root is computed once (an
    export proves thousands of leaves of the same tree head; `inclusion_proof` alone would
    rehash the tree for each)."""

    def __init__(self, leaves: Sequence[bytes]) -> None:
        self.leaves = leaves
        self._roots: dict[tuple[int, int], bytes] = {}

    def root(self, lo: int = 0, hi: int | None = None) -> bytes:
        hi = len(self.leaves) if hi is None else hi
        if hi - lo == 1:
            return self.leaves[lo]
        if hi == lo:
            return EMPTY_ROOT
        found = self._roots.get((lo, hi))
        if found is None:
            k = _split(hi - lo)
            found = self._roots[(lo, hi)] = node_hash(self.root(lo, lo + k), self.root(lo + k, hi))
        return found

    def inclusion(self, index: int) -> list[bytes]:
        """PATH(index, D[n]), as `inclusion_proof`."""
        if not 0 <= index < len(self.leaves):
            raise ValueError(f"leaf {index} is not in a tree of {len(self.leaves)}")
        path: list[bytes] = []
        lo, hi = 0, len(self.leaves)
        while hi - lo > 1:
            k = _split(hi - lo)
            if index < lo + k:
                path.append(self.root(lo + k, hi))
                hi = lo + k
            else:
                path.append(self.root(lo, lo + k))
                lo += k
        path.reverse()
        return path


def consistency_proof(leaves: Sequence[bytes], old_size: int) -> list[bytes]:
    """PROOF(old_size, D[n]): shows the tree of the first `old_size` leaves is a prefix."""
    if not 0 < old_size <= len(leaves):
        raise ValueError(f"no consistency proof from {old_size} to {len(leaves)} leaves")
    return _subproof(leaves, old_size, True)


def _subproof(leaves: Sequence[bytes], m: int, whole: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if whole else [tree_root(leaves)]
    k = _split(n)
    if m <= k:
        return [*_subproof(leaves[:k], m, whole), tree_root(leaves[k:])]
    return [*_subproof(leaves[k:], m - k, False), tree_root(leaves[:k])]


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 §2.1.3.2: whether `leaf` (a leaf hash) is leaf `index` of the tree `root`."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2: whether the tree `new_root` extends the tree `old_root`."""
    if old_size == new_size:
        return not proof and old_root == new_root
    if not 0 < old_size < new_size or not proof:
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root is a node of the new tree
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == old_root and sr == new_root and sn == 0


class Frontier:
    """The roots of the perfect subtrees an append-only tree of `size` leaves decomposes into,
    largest first: enough to append and to compute the root."""

    __slots__ = ("nodes", "size")

    def __init__(self, size: int = 0, nodes: Sequence[bytes] = ()) -> None:
        if len(nodes) != size.bit_count():
            raise ValueError(f"a tree of {size} leaves has {size.bit_count()} frontier nodes")
        self.size = size
        self.nodes = list(nodes)

    def append(self, leaf: bytes) -> None:
        """Add a leaf hash."""
        node, size = leaf, self.size
        while size & 1:  # merge with each perfect subtree of the same height
            node = node_hash(self.nodes.pop(), node)
            size >>= 1
        self.nodes.append(node)
        self.size += 1

    def root(self) -> bytes:
        if not self.nodes:
            return EMPTY_ROOT
        root = self.nodes[-1]
        for node in reversed(self.nodes[:-1]):
            root = node_hash(node, root)
        return root
