"""The reference bug-fix environment (`rolltape env evaluate bugfix`)."""

from rolltape.producers.environments.bugfix._env import BugFixEnv

__all__ = ["BugFixEnv"]
