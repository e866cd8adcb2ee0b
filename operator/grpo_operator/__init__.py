"""grpo-operator: GRPORun API, planning, rendering and reconciliation."""
