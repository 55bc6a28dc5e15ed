"""rolltape.projections: folds events into trajectories, exporters, replay.

Not built yet: see the projections issue. Present so the layout shows where that work belongs.
"""

__all__: list[str] = []
