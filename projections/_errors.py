"""The one exception root of rolltape.projections.

ProjectionError
├── FoldError             a session's records do not fold into a trajectory (no start)
├── ShareGPTFormatError   a ShareGPT row that does not follow the format
├── TokenizerError        a tokenizer folder that cannot be used for Atropos rows
├── AtroposSinkError      the Atropos trainer's API refused or could not be reached
└── ErasuresFileError     a file of erasures whose chain or signatures do not check out
"""

from __future__ import annotations

from rolltape.schemas import RolltapeError


class ProjectionError(RolltapeError):
    """Root of every error rolltape.projections raises."""
