"""Ready-made coordination recipes built on ``coordination.Coordinator``.

Planned: consumer partitioning over Kafka's ``consumer`` protocol, leader
election with fencing tokens, and Connect-style task distribution. None is
released yet; this package holds them as they land.
"""

__all__: list[str] = []
