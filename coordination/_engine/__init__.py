"""The group membership engine: Kafka's AbstractCoordinator, in Python.

Internal, no compatibility guarantee; users reach it through
``coordination.Coordinator``.
"""
