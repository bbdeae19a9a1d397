"""Tools for testing code built on ``coordination``: real brokers and a scripted transport.

``KafkaCluster`` starts real Apache Kafka brokers (KRaft, on loopback) from jars
resolved from Maven Central (with ``BrokerSecurity``: TLS and SASL listeners, ACLs);
``ScriptedTransport`` answers a member's requests from a script, for fast deterministic
tests of error paths.
"""

from __future__ import annotations

from .._protocol import messages as messages
from ..transport import CoordinatorNode as CoordinatorNode
from ..transport import Transport as Transport
from ..transport import TransportError as TransportError
from ._broker import KAFKA_3 as KAFKA_3
from ._broker import NEWEST_KAFKA as NEWEST_KAFKA
from ._broker import BrokerStartError as BrokerStartError
from ._broker import KafkaCluster as KafkaCluster
from ._broker import kafka_classpath as kafka_classpath
from ._broker import running_kafka as running_kafka
from ._maven import MavenError as MavenError
from ._maven import resolve_classpath as resolve_classpath
from ._ports import free_port as free_port
from ._scripted import ManualClock as ManualClock
from ._scripted import ScriptedTransport as ScriptedTransport
from ._scripted import SentRequest as SentRequest
from ._scripted import UnscriptedRequestError as UnscriptedRequestError
from ._security import BrokerSecurity as BrokerSecurity
from ._security import CertificateError as CertificateError
from ._security import make_ca as make_ca

__all__ = [
    "KAFKA_3",
    "NEWEST_KAFKA",
    "BrokerSecurity",
    "BrokerStartError",
    "CertificateError",
    "CoordinatorNode",
    "KafkaCluster",
    "ManualClock",
    "MavenError",
    "ScriptedTransport",
    "SentRequest",
    "Transport",
    "TransportError",
    "UnscriptedRequestError",
    "free_port",
    "kafka_classpath",
    "make_ca",
    "messages",
    "resolve_classpath",
    "running_kafka",
]
