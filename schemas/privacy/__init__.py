"""rolltape.schemas.privacy: content sealed under a session's data key, and data keys wrapped by
a key-encryption key (the wire format of DESIGN's "Privacy": docs/canonical-encoding.md).

Loaded only by what seals or opens content, so `import rolltape.schemas` never loads the crypto
library. Which fields are content is `rolltape.schemas.CONTENT_FIELDS` (no crypto needed).
"""

from rolltape.schemas.privacy._keyring import Access, Keyring
from rolltape.schemas.privacy._keys import KeyEncryptionKey
from rolltape.schemas.privacy._sealing import (
    ContentKey,
    SealedContentError,
    associated_data,
    open_content,
    open_value,
    seal_content,
    seal_value,
    sealed_key_id,
    withhold_content,
)

__all__ = [
    "Access",
    "ContentKey",
    "KeyEncryptionKey",
    "Keyring",
    "SealedContentError",
    "associated_data",
    "open_content",
    "open_value",
    "seal_content",
    "seal_value",
    "sealed_key_id",
    "withhold_content",
]
