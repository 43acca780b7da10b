"""Peak memory growth of one forward, measured in a fresh process.

The protocol: the parent starts ``python -c "from mha.bench.memory import child; child()" REQUEST``
where ``REQUEST`` is a :class:`Request` as JSON; the child builds the model, runs a tiny call of the
same kind (so one-off set-up is not counted), resets its peak, runs the forward and prints one JSON
line ``{"peak_growth_bytes": N}``. On Linux the peak is ``VmHWM`` of ``/proc/self/status`` after
writing ``5`` to ``/proc/self/clear_refs`` (``ru_maxrss`` of ``getrusage`` is not used: it carries
the parent's peak across fork and exec); on CUDA, ``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from dataclasses import dataclass

import torch

from mha.bench.implementations import build_models, call, call_padded, padding_lengths
from mha.bench.timing import sync

MASKS = ("none", "padding")


@dataclass(frozen=True)
class Request:
    impl: str
    seq_len: int
    batch: int
    hidden: int
    heads: int
    device: str
    dtype: str
    mask: str = "none"
    """``"padding"``: every other sequence half padding (``padding_lengths``)."""


def start(request: Request) -> subprocess.Popen:
    """The fresh process that measures ``request``; :func:`result` reads its answer."""
    code = "from mha.bench.memory import child; child()"
    argv = [sys.executable, "-c", code, json.dumps(dataclasses.asdict(request))]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(process: subprocess.Popen) -> int | str:
    """The peak growth in bytes that ``process`` printed, or the end of its error output."""
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        return stderr[-300:]
    return json.loads(stdout.strip().splitlines()[-1])["peak_growth_bytes"]


def _vm_hwm_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def reset_peak() -> int:
    """Reset this process's resident high-water mark to its current size; that size, in bytes."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return peak_bytes()


def peak_bytes() -> int:
    """This process's resident high-water mark since the last ``reset_peak``, in bytes."""
    return _vm_hwm_kib() * 1024


def peak_growth(r: Request) -> int:
    """Bytes the peak grew by during one forward of ``r.impl`` at ``r.seq_len``, in this process."""
    if r.mask not in MASKS:
        raise ValueError(f"mask must be one of {MASKS}, got {r.mask!r}")
    dtype = getattr(torch, r.dtype)
    m = build_models(r.hidden, r.heads, r.device, dtype)[r.impl]
    cuda = r.device.startswith("cuda")
    with torch.inference_mode():

        def forward(x):
            if r.mask == "padding":
                return call_padded(r.impl, m, x, padding_lengths(x.size(0), x.size(1), r.device))
            return call(r.impl, m, x, False, None)

        # A tiny call first, of the same kind (a masked call may take another kernel), so one-off
        # set-up (thread pools, kernels' buffers) is not counted.
        forward(torch.randn(2, 8, r.hidden, device=r.device, dtype=dtype))
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.max_memory_allocated()
        else:
            base = reset_peak()
        x = torch.randn(r.batch, r.seq_len, r.hidden, device=r.device, dtype=dtype)
        out = forward(x)
        sync(r.device)
        peak = torch.cuda.max_memory_allocated() if cuda else peak_bytes()
        del out
    return peak - base


def child() -> None:
    """The fresh process's entry point: measure the request in ``sys.argv[1]``, print the answer."""
    request = Request(**json.loads(sys.argv[1]))
    print(json.dumps({"peak_growth_bytes": peak_growth(request)}))
