"""The reference bug-fix environment (`rolltape env evaluate bugfix`), and `bugfix-judged`, the
same with a tools judge reviewing each fix in the world the agent left."""

from rolltape.producers.environments.bugfix._env import BugFixEnv, BugFixJudgedEnv

__all__ = ["BugFixEnv", "BugFixJudgedEnv"]
