"""Evidence for an export: what lets someone outside the cluster trust each line.

For every session an export uses, the evidence holds the envelopes of each chain the line was
folded from (events, and the judge version's filter outcome and verdicts) and, for each chain's
last envelope, its inclusion proof in a tree head the judge signed (see
rolltape.schemas._checkpoint). Checking it needs only the judge's public key:

1. each envelope hashes to its `hash`, and each chain runs from seq 0 without a gap or a broken
   link (so the last hash commits to every envelope before it);
2. each chain's last envelope is a leaf of a signed tree head: the signature is the judge key's
   and the inclusion proof leads from the leaf to the signed root;
3. the lines, re-folded and re-exported from the evidence alone, are byte for byte the lines of
   the export (done by the caller, with the export's own options).

Pure: the caller reads the topics or the files.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field

from rolltape.projections._trajectory import Trajectory
from rolltape.schemas import (
    ChainHeadLeaf,
    ChainVerifier,
    Checkpoint,
    TreeHead,
    TypedEvent,
    canonical_bytes,
    read_event,
    session_binding,
)
from rolltape.schemas.trust import LogTree, tree_head_signed_by
from rolltape.schemas.trust._merkle import verify_inclusion

if TYPE_CHECKING:
    from rolltape.schemas.privacy import ContentKey

CHECKPOINT_TYPE = "checkpoint"


class InclusionProof(BaseModel):
    """A chain head (`leaf`) is leaf `index` of the tree the judge signed in `tree_head`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    leaf: ChainHeadLeaf
    index: int
    path: tuple[str, ...]
    """RFC 9162 audit path, hex hashes."""
    tree_head: TreeHead
    signature: str


class SessionEvidence(BaseModel):
    """One line of an evidence file: a session's envelopes per chain and the proofs of their
    heads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: str
    envelopes: dict[str, tuple[str, ...]]
    """stream -> the chain's envelopes in seq order, as their canonical JSON text."""
    proofs: tuple[InclusionProof, ...]
    data_keys: dict[str, str] | None = Field(default=None, exclude_if=lambda v: v is None)
    """A session recorded with a subject: its data keys (key id -> the 32 bytes, base64url),
    so that its sealed envelopes open offline. In clear: the export's lines are plaintext."""

    def decoded(self) -> dict[str, list[TypedEvent]]:
        """The envelopes as events, read through the codec (UnreadableRecord for one that is
        no envelope), with sealed content opened by the data keys carried here
        (SealedContentError for content they do not open). The envelopes' hashes cover the
        sealed form: `evidence_problems` checks them as they are."""
        chains = {
            stream: [read_event(e.encode()) for e in texts]
            for stream, texts in self.envelopes.items()
        }
        if not any("sealed" in e.payload for events in chains.values() for e in events):
            return chains
        from rolltape.schemas.privacy import ContentKey, Keyring, SealedContentError

        keyring = Keyring.of(
            self.session_id,
            {
                kid: ContentKey(kid, base64.urlsafe_b64decode(secret))
                for kid, secret in (self.data_keys or {}).items()
            },
        )
        opened: dict[str, list[TypedEvent]] = {}
        for stream, events in chains.items():
            done, access = keyring.open_events(events)
            if done is None:
                raise SealedContentError(
                    f"the {stream} chain is sealed and the evidence carries no data key that "
                    f"opens it ({access})"
                )
            opened[stream] = done
        return opened


def evidence_data_keys(keys: Mapping[str, ContentKey]) -> dict[str, str]:
    """A session's data keys as its evidence line carries them."""
    return {kid: base64.urlsafe_b64encode(key.secret).decode() for kid, key in sorted(keys.items())}


class Checkpoints:
    """The judge's logs as read from the verdicts stream, indexed by chain head. A log is taken
    up to its first checkpoint that does not continue it (the rest cannot be proven)."""

    def __init__(self, logs: Mapping[str, Iterable[TypedEvent]]) -> None:
        self.trees: dict[str, LogTree] = {}
        self._where: dict[tuple[str, str, int, str], tuple[str, int]] = {}
        for log, events in sorted(logs.items()):
            by_seq: dict[int, TypedEvent] = {}
            for event in events:
                if event.type == CHECKPOINT_TYPE:
                    by_seq.setdefault(event.seq, event)
            tree = LogTree(log)
            for seq in sorted(by_seq):
                if tree.add(Checkpoint.model_validate(by_seq[seq].payload)):
                    break
            if tree.heads:
                self.trees[log] = tree
                for index, leaf in enumerate(tree.leaves):
                    key = (leaf.stream, leaf.session_id, leaf.seq, leaf.hash)
                    self._where.setdefault(key, (log, index))

    def prove(self, leaf: ChainHeadLeaf) -> InclusionProof | None:
        """The leaf's inclusion in its log's latest tree head, if the judge committed to it."""
        found = self._where.get((leaf.stream, leaf.session_id, leaf.seq, leaf.hash))
        if found is None:
            return None
        log, index = found
        tree = self.trees[log]
        head, signature = tree.heads[-1]
        path = tree.inclusion(index, head.tree_size)
        return InclusionProof(
            leaf=leaf,
            index=index,
            path=tuple(h.hex() for h in path),
            tree_head=head,
            signature=signature,
        )


def session_evidence(
    trajectory: Trajectory,
    events: Sequence[TypedEvent],
    derived: Sequence[TypedEvent],
    checkpoints: Checkpoints,
    data_keys: Mapping[str, ContentKey] | None = None,
) -> SessionEvidence | None:
    """The evidence of one folded session, or None when a chain head it was folded from is in no
    checkpoint (the judge has not committed to it yet). `events` as the log holds them (sealed
    content still sealed: that is what the chain hashed); `data_keys`, the keys that open it."""
    envelopes: dict[str, tuple[str, ...]] = {}
    proofs = []
    for stream, span in sorted(trajectory.provenance.items()):
        source = events if stream == "events" else derived
        by_seq: dict[int, TypedEvent] = {}
        for event in source:
            if event.stream == stream and event.session_id == trajectory.session_id:
                by_seq.setdefault(event.seq, event)
        envelopes[stream] = tuple(
            canonical_bytes(by_seq[s].mapping).decode() for s in sorted(by_seq)
        )
        leaf = ChainHeadLeaf(
            stream=stream, session_id=trajectory.session_id, seq=span.last_seq, hash=span.last_hash
        )
        proof = checkpoints.prove(leaf)
        if proof is None:
            return None
        proofs.append(proof)
    heads = {
        stream: (span.last_seq, span.last_hash) for stream, span in trajectory.provenance.items()
    }
    binding = checkpoints.prove(session_binding(trajectory.session_id, dict(sorted(heads.items()))))
    if binding is None:
        return None  # the judge has not decided on the session as these chains show it
    proofs.append(binding)
    return SessionEvidence(
        session_id=trajectory.session_id,
        envelopes=envelopes,
        proofs=tuple(proofs),
        data_keys=evidence_data_keys(data_keys) if data_keys else None,
    )


def evidence_problems(
    evidence: SessionEvidence,
    public_key: Ed25519PublicKey,
    signatures: dict[tuple[str, str], bool] | None = None,
) -> list[str]:
    """What is wrong with a session's evidence (nothing: it proves its chains). `signatures`
    remembers tree heads already checked (an export's sessions share a few tree heads)."""
    problems: list[str] = []
    sid = evidence.session_id
    verifier = ChainVerifier()
    for stream, texts in sorted(evidence.envelopes.items()):
        if not texts:
            problems.append(f"the {stream} chain has no envelopes")
        for n, text in enumerate(texts):
            where = f"{stream} envelope {n}"
            verifier.add(text.encode(), position=where, expected_stream=stream, key=sid.encode())
    for brk in verifier.unattributed:
        problems.append(f"{brk.position}: {brk.kind.value}: {brk.detail}")
    heads: dict[str, ChainHeadLeaf] = {}
    for report in verifier.reports():
        for brk in report.breaks:
            where = brk.position or f"{report.stream} seq {brk.seq}"
            problems.append(f"{where}: {brk.kind.value}: {brk.detail}")
        if report.session_id != sid or report.stream not in evidence.envelopes:
            # Filed under another chain's name (a versioned judge's chain under `verdicts`):
            # every chain must be proven as what it is.
            problems.append(
                f"envelopes of {report.session_id}/{report.stream} are filed as this session's "
                f"{', '.join(sorted(evidence.envelopes))}"
            )
        elif report.ok:
            heads[report.stream] = ChainHeadLeaf(
                stream=report.stream, session_id=sid, seq=report.last_seq, hash=report.head_hash
            )
    checked = {} if signatures is None else signatures
    proven = set()
    for proof in evidence.proofs:
        head = proof.tree_head
        key = (head.model_dump_json(), proof.signature)
        if key not in checked:
            checked[key] = tree_head_signed_by(public_key, head, proof.signature)
        if not checked[key]:
            problems.append(
                f"the tree head of {head.log} (size {head.tree_size}) is not signed by this "
                f"public key (it names key {head.key_id})"
            )
            continue
        path = [bytes.fromhex(h) for h in proof.path]
        root = bytes.fromhex(head.root_hash)
        if not verify_inclusion(proof.leaf.leaf_hash(), proof.index, head.tree_size, path, root):
            problems.append(
                f"the proof of {proof.leaf.stream} seq {proof.leaf.seq} does not lead to the "
                f"signed root of {head.log}"
            )
            continue
        proven.add(proof.leaf)
    for stream in sorted(evidence.envelopes):
        leaf = heads.get(stream)
        if leaf is not None and leaf not in proven:
            problems.append(
                f"the {stream} chain's last envelope (seq {leaf.seq}) has no valid proof in a "
                "signed tree head"
            )
    if not problems:
        binding = session_binding(sid, {s: (h.seq, h.hash) for s, h in sorted(heads.items())})
        if binding not in proven:
            problems.append(
                "these chains are not the session as the judge decided on it (a chain is "
                "missing, or stops before the head the judge signed): no proof of its binding"
            )
    return problems
