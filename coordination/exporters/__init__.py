"""Exporters of a member's events to the monitoring systems people already scrape.

Each is a :class:`~coordination.hooks.CoordinationHooks`; give it to any recipe or
:class:`~coordination.Coordinator` as ``hooks=[...]``:

* :class:`coordination.exporters.prometheus.PrometheusHooks` (the ``prometheus`` extra,
  ``prometheus-client``);
* :class:`coordination.exporters.opentelemetry.OpenTelemetryHooks` (the ``opentelemetry``
  extra, ``opentelemetry-api``).

The metrics' names follow Kafka's own group metrics (``rebalance-total``,
``rebalance-latency``, ``failed-rebalance-total``, ...). They are labelled by group only:
member ids change at every restart and would make unbounded series. Several members of one
group in one process add up (``coordination_leader`` counts the leaders in the process).
docs/operations.md lists them with what to alert on.
"""

from __future__ import annotations

BROKER_ERROR_LABEL_OTHER = "other"


def error_label(error: str) -> str:
    """A bounded label for a heartbeat failure: the broker's error name
    (``UNKNOWN_MEMBER_ID``), or ``no_response``."""
    if error.startswith("no response"):
        return "no_response"
    if error.isidentifier() and error.isupper():
        return error
    return BROKER_ERROR_LABEL_OTHER
