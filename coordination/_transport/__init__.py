"""Transports carry the engine's group requests to brokers.

Internal, no compatibility guarantee. ``KafkaTransport`` is the real one, on
kafka-python's network layer; ``coordination.testing.ScriptedTransport`` answers
from a script.
"""
