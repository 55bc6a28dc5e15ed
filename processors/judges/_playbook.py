"""What counts as a defensible answer to each rule (the remedy playbook of the training judge)."""

from __future__ import annotations

from typing import Final

from rolltape.schemas import RuleId

#: rule -> the remedy directions that address it. A decision is defensible when its direction
#: fits at least one rule it cites and its event type fits that direction.
REMEDIES: Final[dict[RuleId, frozenset[str]]] = {
    "R1": frozenset({"decrease_lr", "increase_lr"}),
    "R2": frozenset({"decrease_batch_size", "increase_batch_size"}),
    "R3": frozenset({"stop"}),
    "R4": frozenset({"add_capacity"}),
    "R5": frozenset({"swap_activation", "add_bn_or_residual"}),
    "R6": frozenset({"add_bn_or_residual", "increase_lr"}),
    "R7": frozenset({"decrease_lr", "stop"}),
}

#: remedy direction -> the event types that carry it out.
EVENT_TYPES: Final[dict[str, frozenset[str]]] = {
    "decrease_lr": frozenset({"hyperparameter_change"}),
    "increase_lr": frozenset({"hyperparameter_change"}),
    "decrease_batch_size": frozenset({"hyperparameter_change"}),
    "increase_batch_size": frozenset({"hyperparameter_change"}),
    "add_capacity": frozenset({"architecture_change"}),
    "swap_activation": frozenset({"architecture_change"}),
    "add_bn_or_residual": frozenset({"architecture_change"}),
    "stop": frozenset({"hyperparameter_change", "rule_triggered_no_action"}),
    "none": frozenset({"rule_triggered_no_action"}),
}

#: remedy direction -> the edit ops an architecture change may log for it.
EDIT_OPS: Final[dict[str, frozenset[str]]] = {
    "add_capacity": frozenset({"add_block"}),
    "swap_activation": frozenset({"swap_activation"}),
    "add_bn_or_residual": frozenset({"add_block", "add_batchnorm"}),
}
