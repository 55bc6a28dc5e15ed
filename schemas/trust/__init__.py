"""rolltape.schemas.trust: what lets someone outside the cluster trust a log.

Merkle trees in the style of Certificate Transparency, the judge's Ed25519 keys and tree-head
signatures, and the log tree a verifier rebuilds from a log's checkpoints. The checkpoint records
themselves are payloads of the wire format (`rolltape.schemas.Checkpoint`); this package is
loaded only by what signs or checks them, so `import rolltape.schemas` never loads the crypto
library.
"""

from rolltape.schemas.trust._merkle import Frontier
from rolltape.schemas.trust._signing import (
    LogTree,
    consistency_from_frontier,
    erasure_signed_by,
    key_id,
    load_private_key,
    load_public_key,
    sign_erasure,
    sign_tree_head,
    tree_head_signed_by,
)

__all__ = [
    "Frontier",
    "LogTree",
    "consistency_from_frontier",
    "erasure_signed_by",
    "key_id",
    "load_private_key",
    "load_public_key",
    "sign_erasure",
    "sign_tree_head",
    "tree_head_signed_by",
]
