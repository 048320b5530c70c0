"""The ground every floor stands on: inference requests and responses, their tensors, the
reserved request parameters, and the per-model statistics (no server state, no framework)."""
