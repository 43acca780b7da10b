"""What a run measures: its sizes, lengths and repeats, as data.

``FULL`` is the run behind the site's performance page; ``QUICK`` runs the same cases at tiny sizes
in seconds (``--quick``). The command line starts from one of them and replaces what it is given
(``dataclasses.replace``). The results file records the run's ``Config`` (``record()``), so a later
``--into`` re-measures a case with the same sizes.

>>> FULL.reps(64), FULL.reps(1024), QUICK.reps(16)
(56, 7, 3)
>>> FULL.repeats_backward
4
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

DECODE_REPEATS = 4
"""Decoding runs this many times the base repeats: a cached step takes milliseconds."""
DECODE_STEPS = 20
"""A timed decoding call runs this many steps in a row, each after a crop back to the same length,
as a decoding loop's steps follow one another (one layer's cache stays in the processor's cache
between them; in a deep model every layer's is read from memory again at each step)."""
GQA_REPEATS = 2
"""Grouped-query attention runs this many times the base repeats."""


@dataclass(frozen=True)
class Config:
    quick: bool
    """A short run (``--quick``): its results never stand for the site's page."""
    batch: int
    hidden: int
    heads: int
    seq_lens: tuple[int, ...]
    """The lengths of the timed cases (forward, backward)."""
    memory_seq_lens: tuple[int, ...]
    """The lengths of the memory case."""
    decode_seq_lens: tuple[int, ...]
    """The lengths the decoding case holds in its cache (plus the one position it decodes)."""
    gqa_seq_len: int
    parts_from: int
    """Where the forward time goes (kernel, projections) is measured from this length on."""
    repeats: int
    """Timed rounds per configuration at long lengths."""
    short_scale: int
    """Up to this many times ``repeats`` at short lengths, where noise is as large as a call."""
    warmup: int
    max_call_s: float
    """An implementation whose first call at a length takes longer stops there (torch never)."""
    max_backward_math_seq: int
    """The written-out implementations' backward is not measured beyond this length."""
    max_memory_math_seq: int
    """The written-out implementations' memory is not measured beyond this length."""
    memory_side_by_side: bool
    """The memory case starts its fresh processes all at once (tiny sizes only)."""
    device: str = "cpu"
    dtype: str = "float32"
    generate_steps: int = 200
    """The positions the generation case adds to each prompt."""
    mla_seq_lens: tuple[int, ...] = (16, 64, 256, 1024, 4096, 8192)
    """The lengths the MLA decoding case holds in its caches (plus the one it decodes)."""
    tiled_seq_lens: tuple[int, ...] = (512, 1024, 2048, 4096)
    """The lengths of tiled attention's memory against the written-out scores."""
    tiled_blocks: tuple[int, ...] = (64, 256)
    """The blocks of tiled attention measured."""
    parallel_worlds: tuple[int, ...] = (1, 2, 4)
    """The ranks the sequence and the heads are split over."""
    parallel_seq_lens: tuple[int, ...] = (1024, 2048, 4096)
    """The lengths of the split cases."""

    def reps(self, seq: int, base: int | None = None) -> int:
        """Rounds at this length: more at short lengths, where one call takes milliseconds and a
        shared machine's scheduling noise is as large as the call itself."""
        base = base or self.repeats
        return base * max(1, min(self.short_scale, 1024 // seq))

    @property
    def repeats_backward(self) -> int:
        return max(3, self.repeats // 2 + 1)

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The forward's dtypes: half precision too on a CUDA device."""
        extra = ("float16", "bfloat16") if self.device.startswith("cuda") else ()
        return (self.dtype, *extra)

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def reduced(self) -> bool:
        """A full run with fewer lengths or repeats than ``FULL``."""
        return not self.quick and (
            self.seq_lens != FULL.seq_lens
            or self.memory_seq_lens != FULL.memory_seq_lens
            or self.repeats < FULL.repeats
        )

    def record(self) -> dict:
        """The run's configuration as the results file keeps it."""
        fields = dataclasses.asdict(self)
        del fields["device"]  # the machine's section says which device ran
        fields = {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}
        first = ("batch", "hidden", "heads", "dtype", "repeats", "quick", "seq_lens")
        ordered = {k: fields.pop(k) for k in (*first, "memory_seq_lens", "warmup")}
        ordered["repeats_backward"] = self.repeats_backward
        ordered["repeats_by_seq"] = {str(q): self.reps(q) for q in self.seq_lens}
        return ordered | fields

    @classmethod
    def from_record(cls, record: dict, device: str) -> Config:
        """The configuration a results file recorded, to run again on ``device``."""
        names = {f.name for f in dataclasses.fields(cls)}
        kept = {k: tuple(v) if isinstance(v, list) else v for k, v in record.items() if k in names}
        return cls(**kept, device=device)


FULL = Config(
    quick=False,
    batch=4,
    hidden=512,
    heads=8,
    seq_lens=(64, 128, 256, 512, 1024, 2048, 4096),
    memory_seq_lens=(64, 128, 256, 512, 1024, 2048, 4096),
    decode_seq_lens=(256, 1024, 4096),
    gqa_seq_len=1024,
    parts_from=1024,
    repeats=7,
    short_scale=8,
    warmup=2,
    max_call_s=4.0,
    max_backward_math_seq=2048,
    max_memory_math_seq=4096,
    memory_side_by_side=False,
)
QUICK = dataclasses.replace(
    FULL,
    quick=True,
    batch=2,
    hidden=64,
    seq_lens=(16, 32),
    memory_seq_lens=(32,),
    decode_seq_lens=(16, 32),
    gqa_seq_len=32,
    parts_from=32,
    repeats=3,
    short_scale=1,
    warmup=1,
    memory_side_by_side=True,
    generate_steps=8,
    mla_seq_lens=(16, 32),
    tiled_seq_lens=(32, 64),
    parallel_seq_lens=(32, 64),
)
