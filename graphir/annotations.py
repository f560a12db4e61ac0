"""Typed node annotations: facts that passes add, print in ``[...]`` and may discard.

Each annotation key is declared once here (or by a plugin through :func:`register_annotation`)
with its Python type, a validator and its text codec, so passes use the typed accessors on
:class:`~graphir.ir.Node` (``node.cost``, ``node.device`` ...) instead of raw dictionary keys.

Built-in keys:
    cost: :class:`Cost`, compute time in seconds, one default and/or one per device kind.
    affinity: tuple of device kinds that can run the op (host-only ops: ``("cpu",)``).
    mem: :class:`Mem`, persistent / activation / temporary bytes.
    group: int, fusion group id; the quotient graph merges nodes of one group.
    colocate: str, colocation class; nodes of one class must share a device.
    kernel: str, fused-kernel name; the nodes of one name on one device run as one compiled kernel
        cluster (an XLA cluster in the TF lowering; set by ``fuse-kernels``).
    device: str, name of a device of the module's cluster.
    order: int, position in the device's execution sequence.
    start, finish: float seconds, simulated times.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, cast

import attrs

from graphir.attributes import ByteSize, Duration

DEFAULT_KIND = "default"
"""Key of the device-kind-independent time in :class:`Cost`."""


def _sorted_times(times: Mapping[str, float] | tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    items = times.items() if isinstance(times, Mapping) else times
    out: list[tuple[str, float]] = []
    for kind, seconds in items:
        seconds = float(seconds)
        if not (seconds >= 0 and math.isfinite(seconds)):
            raise ValueError(f"cost for '{kind}' must be a finite non-negative time, got {seconds}")
        out.append((str(kind), seconds))
    return tuple(sorted(out))


@attrs.frozen
class Cost:
    """Compute time of an op in seconds, by device kind.

    ``Cost.of(41.5e-6)`` holds one kind-independent time; ``Cost({"V100": 1e-5, "P100": 2e-5})``
    holds one per device kind. :meth:`time` looks up a kind and falls back to the default.
    """

    times: tuple[tuple[str, float], ...] = attrs.field(converter=_sorted_times)

    @classmethod
    def of(cls, seconds: float) -> Cost:
        """A kind-independent cost."""
        return cls(((DEFAULT_KIND, seconds),))

    def time(self, kind: str | None = None) -> float | None:
        """Time on ``kind`` (or the default when that kind has none); ``None`` if neither exists."""
        table = dict(self.times)
        if kind is not None and kind in table:
            return table[kind]
        if DEFAULT_KIND in table:
            return table[DEFAULT_KIND]
        if kind is None and self.times:
            return self.times[0][1]
        return None

    @property
    def default(self) -> float:
        """The kind-independent time, or the first per-kind time when there is none."""
        value = self.time(None)
        return 0.0 if value is None else value


@attrs.frozen
class Mem:
    """Memory of an op in bytes.

    Attributes:
        persistent: bytes that live for the whole run (weights, optimizer slots, variables).
        activation: bytes of the op's outputs, live until their last consumer ran.
        temporary: scratch bytes needed only while the op runs.
    """

    persistent: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    activation: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    temporary: int = attrs.field(default=0, validator=attrs.validators.ge(0))


@attrs.frozen
class AnnotationKind:
    """Declaration of one annotation key.

    Attributes:
        name: the key, as printed.
        doc: one line for ``--help`` style listings.
        check: validates and normalises a Python value on assignment (raises ``ValueError``).
        to_generic: typed value -> generic text value (int, str, Duration, dict...).
        from_generic: generic value read by the parser -> typed value (raises ``ValueError``).
    """

    name: str
    doc: str
    check: Callable[[Any], Any]
    to_generic: Callable[[Any], Any]
    from_generic: Callable[[Any], Any]


ANNOTATIONS: dict[str, AnnotationKind] = {}


def register_annotation(kind: AnnotationKind) -> AnnotationKind:
    """Declare an annotation key (plugins may add their own); re-declaring a key is an error."""
    if kind.name in ANNOTATIONS and ANNOTATIONS[kind.name] != kind:
        raise ValueError(f"annotation '{kind.name}' is already registered")
    ANNOTATIONS[kind.name] = kind
    return kind


def _check_int(name: str, minimum: int = 0) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"'{name}' must be an integer, got {value!r}")
        if value < minimum:
            raise ValueError(f"'{name}' must be >= {minimum}, got {value}")
        return value

    return check


def _check_str(name: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ValueError(f"'{name}' must be a non-empty string, got {value!r}")
        return value

    return check


def _check_seconds(name: str) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"'{name}' must be a finite time in seconds, got {value!r}")
        return float(value)

    return check


def _duration_from_generic(name: str) -> Callable[[Any], float]:
    def convert(value: Any) -> float:
        if not isinstance(value, Duration):
            raise ValueError(f"'{name}' expects a duration such as 41.5us")
        return value.seconds

    return convert


def _identity(value: Any) -> Any:
    return value


def _check_cost(value: Any) -> Cost:
    if isinstance(value, Cost):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Cost.of(float(value))
    if isinstance(value, Mapping):
        return Cost(cast(Mapping[str, float], value))  # Cost checks each kind and time
    raise ValueError(f"'cost' must be a Cost, a time in seconds or a mapping, got {value!r}")


def _cost_to_generic(cost: Cost) -> Any:
    if len(cost.times) == 1 and cost.times[0][0] == DEFAULT_KIND:
        return Duration(cost.times[0][1])
    return {kind: Duration(seconds) for kind, seconds in cost.times}


def _cost_from_generic(value: Any) -> Cost:
    if isinstance(value, Duration):
        return Cost.of(value.seconds)
    if isinstance(value, dict):
        durations = cast(dict[str, object], value)  # the parser's dict: names to values
        if all(isinstance(v, Duration) for v in durations.values()):
            return Cost({k: cast(Duration, v).seconds for k, v in durations.items()})  # all Durations
    raise ValueError("'cost' expects a duration (41.5us) or {kind = duration, ...}")


_MEM_FIELDS = ("persistent", "activation", "temporary")


def _check_mem(value: Any) -> Mem:
    if isinstance(value, Mem):
        return value
    raise ValueError(f"'mem' must be a Mem, got {value!r}")


def _mem_to_generic(mem: Mem) -> Any:
    return {name: ByteSize(getattr(mem, name)) for name in _MEM_FIELDS if getattr(mem, name)}


def _mem_from_generic(value: Any) -> Mem:
    if not isinstance(value, dict):
        raise ValueError("'mem' expects {persistent = 1MiB, activation = 4KiB, temporary = 0B}")
    fields: dict[str, int] = {}
    for key, size in cast(dict[str, object], value).items():  # the parser's dict: names to values
        if key not in _MEM_FIELDS:
            raise ValueError(f"unknown 'mem' field '{key}' (expected one of {', '.join(_MEM_FIELDS)})")
        if not isinstance(size, ByteSize):
            raise ValueError(f"'mem.{key}' expects a byte size such as 4KiB")
        fields[key] = size.count
    return Mem(**fields)


def _check_affinity(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"'affinity' must be a list of device kinds, got {value!r}")
    return tuple(value)


def _affinity_from_generic(value: Any) -> tuple[str, ...]:
    if not isinstance(value, tuple):
        raise ValueError("'affinity' expects a list of device kinds such as [\"cpu\"]")
    return _check_affinity(value)


def _typed_generic(name: str, kind: type) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, kind):
            article = "an" if kind.__name__[0] in "aeiou" else "a"
            raise ValueError(f"'{name}' expects {article} {kind.__name__}")
        return value

    return convert


for _name, _doc in (("group", "fusion group id"), ("order", "position in its device's sequence")):
    register_annotation(
        AnnotationKind(
            _name, _doc, _check_int(_name), _identity, lambda v, n=_name: _check_int(n)(_typed_generic(n, int)(v))
        )
    )
for _name, _doc in (
    ("device", "assigned device name"),
    ("colocate", "colocation class"),
    ("kernel", "fused-kernel (compiled cluster) name"),
):
    register_annotation(
        AnnotationKind(
            _name, _doc, _check_str(_name), _identity, lambda v, n=_name: _check_str(n)(_typed_generic(n, str)(v))
        )
    )
for _name, _doc in (("start", "simulated start time"), ("finish", "simulated finish time")):
    register_annotation(AnnotationKind(_name, _doc, _check_seconds(_name), Duration, _duration_from_generic(_name)))
register_annotation(
    AnnotationKind("cost", "compute time per device kind", _check_cost, _cost_to_generic, _cost_from_generic)
)
register_annotation(
    AnnotationKind("mem", "persistent/activation/temporary bytes", _check_mem, _mem_to_generic, _mem_from_generic)
)
register_annotation(
    AnnotationKind("affinity", "device kinds that can run the op", _check_affinity, _identity, _affinity_from_generic)
)
