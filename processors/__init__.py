"""rolltape.processors: the faust app (chain audit, rule engine, judges, reward filters).

Not built yet: see the processors issue. Present so the layout shows where that work belongs.
"""

__all__: list[str] = []
