"""Topic metadata for the partitioning recipe: partition counts and topic names."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

log = logging.getLogger("recipes.partitioning")


class TopicMetadata:
    """Partition counts and topic names, from the cluster, through one kafka-python client.

    Thread-safe: the leader's assignment and the pattern watcher both ask.
    """

    def __init__(self, client_settings: Mapping[str, Any]) -> None:
        self._config = dict(client_settings)
        self._lock = threading.Lock()
        self._admin: Any = None

    def _client(self) -> Any:
        if self._admin is None:
            from kafka.admin import KafkaAdminClient

            self._admin = KafkaAdminClient(**self._config)
        return self._admin

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        """Partition count of each topic that exists; missing topics are left out."""
        wanted = sorted(set(topics))
        if not wanted:
            return {}
        with self._lock:
            described = self._client().describe_topics(wanted)
        counts: dict[str, int] = {}
        for t in described:
            name = t.get("topic") or t.get("name")
            if t.get("error_code", 0) == 0 and name and t.get("partitions"):
                counts[name] = len(t["partitions"])
        return counts

    def topic_names(self) -> set[str]:
        """Every topic in the cluster, internal ones excluded."""
        with self._lock:
            names = self._client().list_topics()
        return {n for n in names if not n.startswith("__")}

    def close(self) -> None:
        with self._lock:
            if self._admin is not None:
                self._admin.close()
                self._admin = None
