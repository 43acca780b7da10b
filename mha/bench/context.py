"""What every case gets and records: the configuration, the progress bar, and the implementations
it stopped and the measurements that failed (kept in the results file as data, written out as
sentences by the report)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from mha.bench.config import Config
from mha.bench.timing import Progress


class Stop(TypedDict):
    """An implementation a case stopped measuring: the lengths after ``after_seq_len`` are missing
    from its rows."""

    case: str
    impl: str
    causal: bool
    dtype: str
    after_seq_len: int
    """The longest length measured."""
    took_s: float | None
    """The first call that took longer than ``limit`` seconds; ``None``: ``limit`` is a length."""
    limit: float
    option: str
    """The command-line option that sets ``limit``."""


class Failure(TypedDict):
    """A measurement that failed (a fresh process that exited with an error)."""

    case: str
    impl: str
    seq_len: int
    mask: str
    error: str
    """The end of its standard error."""


@dataclass
class Context:
    """What a case's ``run`` gets: the configuration, the progress bar, and the lists where it
    records the implementations it stopped and the measurements that failed."""

    config: Config
    progress: Progress
    stops: list[Stop] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)

    def stop(
        self,
        case: str,
        impl: str,
        *,
        after: int,
        took_s: float | None,
        limit: float,
        option: str,
        causal: bool = False,
        dtype: str | None = None,
    ) -> None:
        """Record that ``case`` stopped measuring ``impl`` after the length ``after``."""
        self.stops.append(
            Stop(
                case=case,
                impl=impl,
                causal=causal,
                dtype=dtype or self.config.dtype,
                after_seq_len=after,
                took_s=took_s,
                limit=limit,
                option=option,
            )
        )
