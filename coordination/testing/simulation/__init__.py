"""Deterministic simulation of whole groups: a model of Kafka's classic group coordinator,
a seeded scheduler, fault injection and invariant checks (work in progress)."""
