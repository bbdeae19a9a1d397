"""kafka-python's message classes, made ahead so that threads cannot race to make them
(coordination/_kafka_python.py). Each check runs in a fresh interpreter: in this one, other
tests have long made whatever versions they used."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_after_import_coordination_no_version_or_decoder_of_an_answer_is_left_to_make() -> None:
    out = run(
        """
        import coordination
        from kafka.protocol.api_header import ResponseClassRegistry
        missing = []
        for key, message in ResponseClassRegistry._response_class_registry.items():
            primary = message[None]  # raises ReferenceError if the registered one is gone
            for v in range(primary.min_version, primary.max_version + 1):
                flexible = primary.flexible_version_q(v)
                decoder = ("decode", v, flexible, flexible, primary)
                if v not in primary._VERSIONS or decoder not in primary._struct._compiled_encoders:
                    missing.append((key, v))
        print(len(ResponseClassRegistry._response_class_registry), missing)
        """
    )
    count, missing = out.split(" ", 1)
    assert int(count) >= 50 and missing == "[]", out


def test_a_version_class_made_twice_leaves_kafka_python_unable_to_decode_that_api() -> None:
    # Why the above matters: what a second thread making the same version at the same moment
    # does (kafka-python keeps one class and registers the other, weakly); once collected,
    # every ApiVersions answer of the process fails to decode. A kafka-python that registers
    # only the primary class makes this check fail: the making ahead can then go.
    out = run(
        """
        import gc
        from kafka.protocol.api_header import RequestHeader, ResponseClassRegistry
        from kafka.protocol.metadata import ApiVersionsResponse
        kept = ApiVersionsResponse[3]
        lost = type(kept.__name__, tuple(ApiVersionsResponse.mro()), {"_class_version": 3},
                    init=False)
        del lost
        gc.collect()
        header = RequestHeader(request_api_key=18, request_api_version=3, correlation_id=1,
                               client_id="c")
        try:
            header.get_response_class()
            print("decodes")
        except ReferenceError:
            print("poisoned")
        """
    )
    assert out == "poisoned"


def test_admin_clients_that_cannot_bootstrap_leave_no_thread_behind() -> None:
    # A share consumer looks its topics' leaders up again after each failure: with
    # kafka-python's KafkaAdminClient each failed bootstrap kept its I/O thread running.
    import threading
    import time

    import pytest
    from kafka.errors import KafkaTimeoutError

    from coordination.share_group import ClusterLeaders

    before = set(threading.enumerate())
    leaders = ClusterLeaders({"bootstrap_servers": "127.0.0.1:1", "bootstrap_timeout_ms": 200})
    for _ in range(3):
        with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
            leaders.locate(frozenset({"orders"}))
    leaders.close()
    time.sleep(0.2)
    assert set(threading.enumerate()) <= before
