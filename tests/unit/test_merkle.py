"""Checkpoint trees: RFC 6962 roots (against its published vectors and pymerkle, an independent
implementation), inclusion and consistency proofs that verify, and fail when anything changes."""

from __future__ import annotations

import pytest
from pymerkle import InmemoryTree

from rolltape.schemas.trust import consistency_from_frontier
from rolltape.schemas.trust._merkle import (
    EMPTY_ROOT,
    Frontier,
    ProofTree,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    tree_root,
    verify_consistency,
    verify_inclusion,
)

# RFC 6962's test leaves (as in Certificate Transparency's reference implementations).
RFC_LEAVES = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    b"\x50\x51\x52\x53\x54\x55\x56\x57",
    b"\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f",
]


def leaves(n: int) -> list[bytes]:
    return [leaf_hash(f"leaf {i}".encode()) for i in range(n)]


def test_roots__match_the_rfc_6962_vectors() -> None:
    hashes = [leaf_hash(x) for x in RFC_LEAVES]
    assert tree_root([]) == EMPTY_ROOT
    assert tree_root(hashes[:1]).hex() == (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    )
    assert tree_root(hashes).hex() == (
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"
    )


def test_roots__match_pymerkle_for_every_size_up_to_70() -> None:
    tree = InmemoryTree(algorithm="sha256")
    data = [f"entry {i}".encode() for i in range(70)]
    frontier = Frontier()
    for n, item in enumerate(data, start=1):
        tree.append_entry(item)
        frontier.append(leaf_hash(item))
        ours = tree_root([leaf_hash(x) for x in data[:n]])
        assert ours == tree.get_root(n) == frontier.root(), n


def test_inclusion__every_leaf_of_every_size_verifies_and_a_changed_input_does_not() -> None:
    for size in range(1, 34):
        hashes = leaves(size)
        root = tree_root(hashes)
        for index in range(size):
            proof = inclusion_proof(hashes, index)
            assert verify_inclusion(hashes[index], index, size, proof, root)
            assert not verify_inclusion(leaf_hash(b"other"), index, size, proof, root)
            if size > 1:
                other = (index + 1) % size
                assert not verify_inclusion(hashes[index], other, size, proof, root)
            if proof:
                bent = [*proof[:-1], bytes(32)]
                assert not verify_inclusion(hashes[index], index, size, bent, root)


def test_consistency__every_prefix_verifies_and_a_rewritten_history_does_not() -> None:
    for new in range(1, 34):
        hashes = leaves(new)
        new_root = tree_root(hashes)
        for old in range(1, new + 1):
            old_root = tree_root(hashes[:old])
            proof = consistency_proof(hashes, old)
            assert verify_consistency(old, new, old_root, new_root, proof), (old, new)
            forged = tree_root([leaf_hash(b"rewritten"), *hashes[1:old]])
            assert not verify_consistency(old, new, forged, new_root, proof)


def test_frontier__rejects_a_node_count_that_does_not_fit_its_size() -> None:
    with pytest.raises(ValueError, match="frontier nodes"):
        Frontier(3, [bytes(32)])


def test_consistency_from_frontier__equals_the_proof_from_all_leaves() -> None:
    for new in range(1, 40):
        hashes = leaves(new)
        for old in range(1, new + 1):
            frontier = Frontier()
            for h in hashes[:old]:
                frontier.append(h)
            assert consistency_from_frontier(frontier, hashes[old:]) == (
                consistency_proof(hashes, old) if old < new else []
            ), (old, new)


def test_proof_tree__gives_the_same_paths_and_root_as_the_recursive_definition() -> None:
    for size in range(1, 40):
        hashes = leaves(size)
        tree = ProofTree(hashes)
        assert tree.root() == tree_root(hashes)
        assert [tree.inclusion(i) for i in range(size)] == [
            inclusion_proof(hashes, i) for i in range(size)
        ]
