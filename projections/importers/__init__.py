"""Importers of foreign logs: Hermes-agent ShareGPT rows and env_rl judge_logs folders.

They live beside the exporters rather than in producers: reading a ShareGPT row is the inverse of
writing one (one codec, one escaping rule), and re-judging an env_rl run uses the processors' rule
engine, which producers may not import.
"""

from rolltape.projections.importers._env_rl import (
    FILES as ENV_RL_FILES,
)
from rolltape.projections.importers._env_rl import (
    ChainProblem,
    EnvRlRun,
    env_rl_hash,
    env_rl_session,
    read_env_rl,
    rule_disagreements,
    their_rule_evaluations,
    verify_chain,
)
from rolltape.projections.importers._hermes import RowError, hermes_session, hermes_sessions
from rolltape.projections.importers._imported import ImportedSession

__all__ = [
    "ENV_RL_FILES",
    "ChainProblem",
    "EnvRlRun",
    "ImportedSession",
    "RowError",
    "env_rl_hash",
    "env_rl_session",
    "hermes_session",
    "hermes_sessions",
    "read_env_rl",
    "rule_disagreements",
    "their_rule_evaluations",
    "verify_chain",
]
