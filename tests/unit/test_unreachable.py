"""A cluster that cannot be reached is reported as that: a ConnectionFailedError, not a TLS
or login problem (which would send the user to the wrong settings)."""

from __future__ import annotations

import pytest

from coordination import describe_group
from coordination.errors import AuthenticationFailedError, ConnectionFailedError, TlsError
from coordination.testing import free_port


def test_describing_a_group_on_a_port_where_nothing_listens_is_not_a_tls_error() -> None:
    server = f"127.0.0.1:{free_port()}"
    with pytest.raises(ConnectionFailedError, match="nothing listens") as raised:
        describe_group("g", bootstrap_servers=server)
    assert not isinstance(raised.value, TlsError | AuthenticationFailedError)
