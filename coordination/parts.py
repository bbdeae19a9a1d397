"""Checking what a member is given: its parts (clock, transport, a recipe's own) and its ints.

A member takes pluggable objects (``clock=``, ``transport=``; a recipe may add its own,
such as the consumer's ``fetcher=``), each expected to follow a ``typing.Protocol``. A
wrong object passed there would only fail later, on a background thread; :func:`check_part`
makes it fail at construction, with a message that names the argument. :func:`check_int`
does the same for an int setting of a recipe's own.

Example:
    from coordination.parts import check_part

    class Sink(Protocol):
        def write(self, record: bytes) -> None: ...

    class Mirror(Coordinator):
        def __init__(self, group_id: str, *, sink: Sink, **settings: Any) -> None:
            check_part("sink", sink, Sink)  # ConfigurationError: sink= must be a Sink (write)...
            super().__init__(group_id, **settings)
"""

from __future__ import annotations

from .errors import ConfigurationError

__all__ = ["check_int", "check_part"]


def check_part(argument: str, value: object, interface: type) -> None:
    """Refuse ``value`` if it lacks a public method of the Protocol ``interface``.

    Args:
        argument: the name it was passed under, for the message (``"transport"``).
        value: the object given; None (the default part) is always accepted.
        interface: the ``typing.Protocol`` class it must follow; its methods whose names
            do not start with ``_`` must be callable attributes of ``value``.

    Raises:
        ConfigurationError: ``value`` lacks one of them; the message reads
            ``"<argument>= must be a <Interface> (<methods>); the <type> given has no <missing>"``.
    """
    if value is None:
        return
    methods = [
        name for name, member in vars(interface).items()
        if callable(member) and not name.startswith("_")
    ]  # fmt: skip
    missing = [m for m in methods if not callable(getattr(value, m, None))]
    if missing:
        raise ConfigurationError(
            f"{argument}= must be a {interface.__name__} ({', '.join(methods)}); the "
            f"{type(value).__name__} given has no {', '.join(missing)}"
        )


def check_int(
    name: str,
    value: object,
    *,
    minimum: int | None = None,
    rule: str | None = None,
    error: type[ValueError] = ConfigurationError,
) -> int:
    """``value`` if it is an int (a bool is not) of at least ``minimum``; else raise ``error``.

    The message reads ``"<name> must be <rule>, got <value>"``; ``rule`` defaults to
    ``"an int"`` or ``"an int >= <minimum>"``.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (minimum is not None and value < minimum)
    ):
        if rule is None:
            rule = "an int" if minimum is None else f"an int >= {minimum}"
        raise error(f"{name} must be {rule}, got {value!r}")
    return value
