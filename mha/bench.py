"""Benchmark: time, memory and achieved FLOP rate of each MHA implementation.

Run ``python -m mha.bench`` (about 10-20 minutes on 2 cores) or ``python -m mha.bench --quick``
(tiny sizes, a few seconds). It writes a JSON file (``--out``, by default
``docs/assets/bench/results.json``) and prints a table.

What it measures, all in one process and in one run so that the ratios compare like with like:

- forward time (``torch.inference_mode()``, eval mode) and forward + backward time of
  ``annotated``, ``pure``, ``full-fast`` (``mha.full.MHA(fast=True)``), ``full-math``
  (``fast=False``) and ``torch`` (``nn.MultiheadAttention`` built by ``mha.interop.to_torch`` from
  the same weights, called with ``need_weights=False``) over the sequence lengths; the
  implementations run interleaved (round robin over the repeats) after a warm-up, and the
  median is reported with its ratio to ``torch`` measured in the same rounds;
- causal forward: ``full-fast`` and ``full-math`` with ``is_causal=True`` against
  ``nn.MultiheadAttention`` with a causal ``attn_mask`` and ``is_causal=True``;
- achieved GFLOP/s: the four projections ``4 * 2 * b * L * d**2`` plus the two attention products
  ``2 * 2 * b * L**2 * d``; a causal run is counted with the same FLOPs (the kernel may skip the
  masked half, the count does not), as a fraction of the rate of a ``[b * L, d] @ [d, d]`` matmul
  timed in the same rounds;
- peak memory growth of one forward per configuration, each in a fresh process: write ``5`` to
  ``/proc/self/clear_refs`` (resets the peak resident size), read ``VmHWM`` from
  ``/proc/self/status`` as the baseline, build the input, run, read ``VmHWM`` again. (The
  ``ru_maxrss`` of ``getrusage`` is not used: on Linux it carries the parent's peak across fork and
  exec.)
- decoding one position with a ``KVCache`` holding ``L - 1`` positions against recomputing the
  causal forward over all ``L`` positions;
- grouped-query attention: ``kv_heads = heads / 4`` (and ``heads / 2``) against full heads, cache
  bytes and forward time.

On a CUDA device it also runs the forward in float16 and bfloat16 (rows carry a ``dtype`` key).

中文:
    基准测试：各个多头注意力实现的时间、内存和达到的浮点运算速率。运行 ``python -m mha.bench``
    （2 核上约 10-20 分钟）或 ``python -m mha.bench --quick``（很小的尺寸，几秒）。
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import mha.annotated
import mha.full
import mha.pure
from mha.interop import to_torch

IMPLS = ("annotated", "pure", "full-fast", "full-math", "torch")
CAUSAL_IMPLS = ("full-fast", "full-math", "torch")
MATH_IMPLS = ("annotated", "pure", "full-math")
# Measured with a padding mask too: the fast path must not blow a small mask up to [L, L].
MASKED_IMPLS = ("full-fast", "torch")
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "docs" / "assets" / "bench" / "results.json"


# ---------------------------------------------------------------------------- building


def build_models(hidden: int, heads: int, device: str, dtype: torch.dtype) -> dict[str, nn.Module]:
    """The five implementations, in eval mode, all holding the same weights."""
    torch.manual_seed(0)
    fast = mha.full.MHA(hidden, heads, fast=True)
    state = fast.state_dict()
    slow = mha.full.MHA(hidden, heads, fast=False)
    annotated = mha.annotated.MHA(hidden, heads)
    pure = mha.pure.MHA(hidden, heads)
    for m in (slow, annotated, pure):
        m.load_state_dict(state)
    models = {
        "annotated": annotated,
        "pure": pure,
        "full-fast": fast,
        "full-math": slow,
        "torch": to_torch(fast),
    }
    return {k: m.to(device=device, dtype=dtype).eval() for k, m in models.items()}


def causal_bool_mask(seq: int, device: str) -> torch.Tensor:
    """``nn.MultiheadAttention``'s convention: ``True`` = may NOT attend (above the diagonal)."""
    return torch.ones(seq, seq, dtype=torch.bool, device=device).triu(1)


def padding_lengths(batch: int, seq: int, device: str) -> torch.Tensor:
    """The real lengths of the masked memory case: every other sequence half padding."""
    return torch.tensor([seq if i % 2 == 0 else seq // 2 for i in range(batch)], device=device)


def call_padded(name: str, model: nn.Module, x: torch.Tensor, lengths: torch.Tensor):
    """One forward with a padding mask, each in its own convention: ``mha`` takes the
    ``[batch, 1, 1, L]`` mask of ``mha.full.padding_mask`` (``True`` = may attend),
    ``nn.MultiheadAttention`` a ``key_padding_mask`` ``[batch, L]`` (``True`` = padding)."""
    mask = mha.full.padding_mask(lengths, x.size(1))  # [batch, 1, 1, L]
    if name == "torch":
        return model(x, x, x, key_padding_mask=~mask[:, 0, 0], need_weights=False)[0]
    return model(x, attn_mask=mask)


def call(name: str, model: nn.Module, x: torch.Tensor, causal: bool, mask: torch.Tensor | None):
    if name == "torch":
        if causal:
            return model(x, x, x, attn_mask=mask, is_causal=True, need_weights=False)[0]
        return model(x, x, x, need_weights=False)[0]
    if causal:
        return model(x, is_causal=True)
    return model(x)


def flops(batch: int, seq: int, hidden: int) -> float:
    """Projections ``4 * 2 * b * L * d**2`` plus attention products ``2 * 2 * b * L**2 * d``."""
    return 4 * 2 * batch * seq * hidden**2 + 2 * 2 * batch * seq**2 * hidden


# ---------------------------------------------------------------------------- timing


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def reps(args: argparse.Namespace, seq: int, base: int | None = None) -> int:
    """Rounds at this length: more at short lengths, where one call takes milliseconds and a
    shared machine's scheduling noise is as large as the call itself (up to 8 times the base)."""
    base = base or args.repeats
    if args.quick:
        return base
    return base * max(1, min(8, 1024 // seq))


def round_robin(
    fns: dict[str, Callable[[], object]], repeats: int, warmup: int, device: str
) -> dict[str, float]:
    """Median seconds per call of each function, run interleaved: every round calls each once."""
    for _ in range(warmup):
        for f in fns.values():
            f()
            sync(device)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(repeats):
        # Rotate the starting point so no function always runs right after the same one.
        names = list(fns)
        names = names[r % len(names) :] + names[: r % len(names)]
        for k in names:
            sync(device)
            t0 = time.perf_counter()
            fns[k]()
            sync(device)
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def first_call_seconds(f: Callable[[], object], device: str) -> float:
    sync(device)
    t0 = time.perf_counter()
    f()
    sync(device)
    return time.perf_counter() - t0


class Progress:
    """A plain-text progress bar on stderr (one line, redrawn)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.enabled = max(total, 1), 0, enabled
        self.start = time.perf_counter()

    def step(self, label: str, n: int = 1) -> None:
        self.done = min(self.done + n, self.total)
        if not self.enabled:
            return
        width = 30
        filled = round(width * self.done / self.total)
        elapsed = time.perf_counter() - self.start
        bar = "#" * filled + "-" * (width - filled)
        line = f"\r[{bar}] {self.done}/{self.total} {elapsed:6.0f}s {label[:40]:<40}"
        sys.stderr.write(line)
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()


# ---------------------------------------------------------------------------- sections


def bench_forward(args, device, dtype, models, progress, notes, dtype_name) -> tuple[list, list]:
    """Forward rows (plain and causal) and per-length GEMM rates."""
    rows, gemm_rows = [], []
    stopped: dict[tuple[str, bool], int] = {}
    for seq in args.seq:
        torch.manual_seed(seq)
        x = torch.randn(args.batch, seq, args.hidden, device=device, dtype=dtype)
        a = torch.randn(args.batch * seq, args.hidden, device=device, dtype=dtype)
        w = torch.randn(args.hidden, args.hidden, device=device, dtype=dtype)
        mask = causal_bool_mask(seq, device)
        fns: dict[str, Callable[[], object]] = {}
        keys: dict[str, tuple[str, bool]] = {}
        with torch.inference_mode():
            for causal in (False, True):
                for name in CAUSAL_IMPLS if causal else IMPLS:
                    if (name, causal) in stopped:
                        continue
                    m = models[name]

                    def f(name=name, m=m, causal=causal, x=x, mask=mask):
                        return call(name, m, x, causal, mask)

                    # One untimed call decides whether this implementation is still affordable.
                    took = first_call_seconds(f, device)
                    if took > args.max_call and name != "torch":
                        stopped[(name, causal)] = seq
                        notes.append(
                            f"{dtype_name} forward{' causal' if causal else ''}: {name} stopped "
                            f"after seq_len {seq} (one call took {took:.1f} s > --max-call "
                            f"{args.max_call} s); longer lengths not measured"
                        )
                    key = f"{name}{'/causal' if causal else ''}"
                    fns[key] = f
                    keys[key] = (name, causal)
            fns["gemm"] = lambda a=a, w=w: a @ w
            med = round_robin(fns, reps(args, seq), args.warmup, device)
        gemm_rate = 2 * args.batch * seq * args.hidden**2 / med["gemm"] / 1e9
        gemm_rows.append({"seq_len": seq, "gflops": gemm_rate, "dtype": dtype_name})
        fl = flops(args.batch, seq, args.hidden)
        for key, (name, causal) in keys.items():
            ref = med["torch/causal" if causal else "torch"]
            rate = fl / med[key] / 1e9
            row = {
                "impl": name,
                "seq_len": seq,
                "causal": causal,
                "median_ms": med[key] * 1e3,
                "ratio_vs_torch": med[key] / ref,
                "gflops": rate,
                "fraction_of_gemm": rate / gemm_rate,
            }
            if dtype_name != "float32":
                row["dtype"] = dtype_name
            rows.append(row)
        progress.step(f"{dtype_name} forward seq_len {seq}")
    return rows, gemm_rows


def bench_parts(args, device, dtype, models, progress) -> list:
    """Where full-fast's forward time goes: the SDPA kernel alone and the projections alone."""
    rows = []
    m = models["full-fast"]
    for seq in [s for s in args.seq if s >= args.parts_from]:
        b, d, h = args.batch, args.hidden, args.heads
        x = torch.randn(b, seq, d, device=device, dtype=dtype)
        q, k, v = (torch.randn(b, h, seq, d // h, device=device, dtype=dtype) for _ in range(3))
        a = torch.randn(b * seq, d, device=device, dtype=dtype)
        w = torch.randn(d, d, device=device, dtype=dtype)
        with torch.inference_mode():
            fns = {
                "full-fast": lambda x=x: m(x),
                "sdpa": lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v),
                "projections": lambda x=x: (m.W_q(x), m.W_k(x), m.W_v(x), m.W_o(x)),
                "gemm": lambda a=a, w=w: a @ w,
            }
            med = round_robin(fns, reps(args, seq), args.warmup, device)
        gemm_rate = 2 * b * seq * d**2 / med["gemm"] / 1e9
        rows.append(
            {
                "seq_len": seq,
                "full_fast_ms": med["full-fast"] * 1e3,
                "sdpa_ms": med["sdpa"] * 1e3,
                "projections_ms": med["projections"] * 1e3,
                "other_ms": (med["full-fast"] - med["sdpa"] - med["projections"]) * 1e3,
                "sdpa_fraction_of_gemm": 2 * 2 * b * seq**2 * d / med["sdpa"] / 1e9 / gemm_rate,
                "projections_fraction_of_gemm": 4
                * 2
                * b
                * seq
                * d**2
                / med["projections"]
                / 1e9
                / gemm_rate,
            }
        )
        progress.step(f"parts seq_len {seq}")
    return rows


def bench_backward(args, device, dtype, models, progress, notes) -> list:
    rows = []
    stopped: set[str] = set()
    for seq in args.seq:
        torch.manual_seed(seq)
        x = torch.randn(args.batch, seq, args.hidden, device=device, dtype=dtype)
        fns: dict[str, Callable[[], object]] = {}
        for name in IMPLS:
            if name in stopped:
                continue
            m = models[name]
            params = list(m.parameters())

            def f(name=name, m=m, params=params, x=x):
                for p in params:
                    p.grad = None
                xi = x.detach().requires_grad_(True)
                call(name, m, xi, False, None).sum().backward()

            if name in MATH_IMPLS and seq > args.max_backward_math_seq:
                stopped.add(name)
                notes.append(
                    f"forward+backward: {name} not measured beyond seq_len "
                    f"{args.max_backward_math_seq} (the L x L scores and their gradient would need "
                    f"several GB per call on this machine: --max-backward-math-seq)"
                )
                continue
            took = first_call_seconds(f, device)
            if took > args.max_call * 3 and name != "torch":
                stopped.add(name)
                notes.append(
                    f"forward+backward: {name} stopped after seq_len {seq} (one call took "
                    f"{took:.1f} s > 3 x --max-call); longer lengths not measured"
                )
            fns[name] = f
        med = round_robin(fns, reps(args, seq, args.repeats_backward), 1, device)
        for name, t in med.items():
            rows.append(
                {
                    "impl": name,
                    "seq_len": seq,
                    "causal": False,
                    "median_ms": t * 1e3,
                    "ratio_vs_torch": t / med["torch"],
                }
            )
        progress.step(f"backward seq_len {seq}")
    return rows


def bench_decode(args, device, dtype, models, progress) -> list:
    rows = []
    m = models["full-fast"]
    for seq in args.decode_seq:
        torch.manual_seed(seq)
        x = torch.randn(args.batch, seq, args.hidden, device=device, dtype=dtype)
        with torch.inference_mode():
            cache = mha.full.KVCache()
            m(x[:, :-1], is_causal=True, cache=cache)  # prefill: L - 1 positions
            m(x[:, -1:], is_causal=True, cache=cache)  # one step, so the buffer has grown
            last = x[:, -1:]

            def step(cache=cache, last=last, held=seq - 1):
                cache.crop(held)  # back to L - 1 positions: each timed step appends the L-th
                return m(last, is_causal=True, cache=cache)

            med = round_robin(
                {"cache": step, "recompute": lambda x=x: m(x, is_causal=True)},
                4 * args.repeats,  # a cached step takes milliseconds: more rounds
                args.warmup,
                device,
            )
        rows.append(
            {
                "seq_len": seq,
                "cache_ms": med["cache"] * 1e3,
                "recompute_ms": med["recompute"] * 1e3,
                "speedup": med["recompute"] / med["cache"],
            }
        )
        progress.step(f"decode seq_len {seq}")
    return rows


def bench_gqa(args, device, dtype, progress) -> list:
    seq = args.gqa_seq
    b, d, h = args.batch, args.hidden, args.heads
    kv_list = [k for k in (h, h // 2, h // 4) if k >= 1 and h % k == 0]
    models, cache_bytes = {}, {}
    x = torch.randn(b, seq, d, device=device, dtype=dtype)
    with torch.inference_mode():
        for kv in kv_list:
            torch.manual_seed(0)
            models[kv] = mha.full.MHA(d, h, kv_heads=kv).to(device=device, dtype=dtype).eval()
            cache = mha.full.KVCache()
            models[kv](x, is_causal=True, cache=cache)
            cache_bytes[kv] = sum(t.numel() * t.element_size() for t in (cache.keys, cache.values))
        med = round_robin(
            {str(kv): (lambda m=models[kv]: m(x, is_causal=True)) for kv in kv_list},
            2 * args.repeats,
            args.warmup,
            device,
        )
    progress.step(f"gqa seq_len {seq}")
    return [
        {
            "heads": h,
            "kv_heads": kv,
            "seq_len": seq,
            "cache_bytes": cache_bytes[kv],
            "cache_ratio_vs_full": cache_bytes[kv] / cache_bytes[h],
            "median_ms": med[str(kv)] * 1e3,
        }
        for kv in kv_list
    ]


# ---------------------------------------------------------------------------- memory


def _vm_hwm_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(args) -> None:
    """Run one forward of ``args.child`` at ``args.child_seq`` and print the peak memory growth."""
    device = args.device
    dtype = getattr(torch, args.dtype)
    models = build_models(args.hidden, args.heads, device, dtype)
    name = args.child
    m = models[name]
    with torch.inference_mode():

        def forward(x):
            if args.child_mask == "padding":
                return call_padded(name, m, x, padding_lengths(x.size(0), x.size(1), device))
            return call(name, m, x, False, None)

        # A tiny call first, of the same kind (a masked call may take another kernel), so one-off
        # set-up (thread pools, kernels' buffers) is not counted.
        forward(torch.randn(2, 8, args.hidden, device=device, dtype=dtype))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.max_memory_allocated()
        else:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            base = _vm_hwm_kib() * 1024
        x = torch.randn(args.batch, args.child_seq, args.hidden, device=device, dtype=dtype)
        out = forward(x)
        sync(device)
        if device.startswith("cuda"):
            peak = torch.cuda.max_memory_allocated()
        else:
            peak = _vm_hwm_kib() * 1024
        del out
    print(json.dumps({"peak_growth_bytes": peak - base}))


def bench_memory(args, progress, notes) -> tuple[list, list]:
    """The peak memory growth of one forward: every implementation without a mask (``rows``),
    and ``MASKED_IMPLS`` with a ``[batch, 1, 1, L]`` padding mask (``masked``)."""
    rows, masked = [], []
    configs = [(name, "none") for name in IMPLS] + [(name, "padding") for name in MASKED_IMPLS]
    for seq in args.mem_seq:
        growth = {}
        running = {}
        for name, mask in configs:
            if name in MATH_IMPLS and seq > args.max_memory_math_seq:
                continue
            cmd = [
                sys.executable,
                "-m",
                "mha.bench",
                "--child",
                name,
                "--child-seq",
                str(seq),
                "--batch",
                str(args.batch),
                "--hidden",
                str(args.hidden),
                "--heads",
                str(args.heads),
                "--device",
                args.device,
                "--dtype",
                "float32",
                "--child-mask",
                mask,
            ]
            # Each configuration in its own process. The quick run starts them all at once (its
            # inputs are tiny; the peak is per process, so running side by side does not change
            # it); the full run one after another, as the long ones need GBs each.
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            running[name, mask] = proc
            if not args.quick:
                proc.wait()
        for (name, mask), proc in running.items():
            stdout, stderr = proc.communicate()
            if proc.returncode != 0:
                notes.append(
                    f"memory: {name} ({mask} mask) at seq_len {seq} failed: {stderr[-300:]}"
                )
                continue
            bytes_ = json.loads(stdout.strip().splitlines()[-1])["peak_growth_bytes"]
            growth[name if mask == "none" else (name, mask)] = bytes_
            progress.step(f"memory {name} ({mask} mask) seq_len {seq}")
        if not growth.get("torch"):
            notes.append(f"memory: no nn.MultiheadAttention figure at seq_len {seq}; row left out")
            continue
        for name in MASKED_IMPLS:
            if (name, "padding") in growth and growth.get(name):
                g = growth[name, "padding"]
                masked.append(
                    {
                        "impl": name,
                        "seq_len": seq,
                        "mask": "padding",
                        "peak_growth_mb": g / 2**20,
                        "unmasked_mb": growth[name] / 2**20,
                        "ratio_vs_unmasked": g / growth[name],
                    }
                )
        for name, g in growth.items():
            if isinstance(name, tuple):
                continue  # a masked configuration: in `masked`
            rows.append(
                {
                    "impl": name,
                    "seq_len": seq,
                    "peak_growth_mb": g / 2**20,
                    "ratio_vs_torch": g / growth["torch"],
                }
            )
    if any(seq > args.max_memory_math_seq for seq in args.mem_seq):
        notes.append(
            f"memory: annotated, pure and full-math not measured beyond seq_len "
            f"{args.max_memory_math_seq} (--max-memory-math-seq)"
        )
    return rows, masked


# ---------------------------------------------------------------------------- targets


def _pick(rows, impl, seq, causal=False):
    for r in rows:
        if (
            r["impl"] == impl
            and r["seq_len"] == seq
            and r.get("causal", False) == causal
            and "dtype" not in r
        ):
            return r
    return None


# A text of the targets in both languages: (English, 中文). The performance page shows the one of
# its language; results.json keeps both (``name``/``why`` and ``name_zh``/``why_zh``).
Text = tuple[str, str]


def _join(*parts: Text) -> Text:
    return "".join(p[0] for p in parts), "".join(p[1] for p in parts)


def _at(wanted: int, available: list[int]) -> tuple[int, Text]:
    """The length to check a target at: ``wanted`` if measured, else the longest measured."""
    if wanted in available:
        return wanted, ("", "")
    got = max(available)
    return got, (
        f" (seq_len {wanted} not measured in this run; checked at seq_len {got})",
        f"（这次运行没有测 seq_len {wanted}，改在 seq_len {got} 检查）",
    )


def _parts_text(parts: list, seq: int, row: dict | None = None) -> Text:
    """Where full-fast's time goes at ``seq``, from the breakdown rounds."""
    p = next((p for p in parts if p["seq_len"] == seq), None)
    if p is None:
        return "no breakdown measured at this length", "这个长度没有测各部分的耗时"
    if p["other_ms"] >= 0:
        rest = (
            f"the rest (head split/merge copies, checks) {p['other_ms']:.1f} ms",
            f"其余（拆分、合并各头时的复制和输入检查）{p['other_ms']:.1f} ms",
        )
    else:
        rest = (
            "the rest within the noise (kernel and projections timed alone exceed the call)",
            "其余部分在噪声之内（单独计时的算子和投影加起来超过了整次调用）",
        )
    text = _join(
        (
            f"at seq_len {seq} full-fast takes {p['full_fast_ms']:.1f} ms: the SDPA kernel "
            f"alone {p['sdpa_ms']:.1f} ms ({p['sdpa_fraction_of_gemm']:.2f} of the GEMM "
            f"rate), the four projections alone {p['projections_ms']:.1f} ms "
            f"({p['projections_fraction_of_gemm']:.2f} of the GEMM rate), ",
            f"seq_len {seq} 时 full-fast 用时 {p['full_fast_ms']:.1f} ms：其中 SDPA 算子单独 "
            f"{p['sdpa_ms']:.1f} ms（GEMM 速率的 {p['sdpa_fraction_of_gemm']:.2f}），"
            f"四个投影单独 {p['projections_ms']:.1f} ms"
            f"（GEMM 速率的 {p['projections_fraction_of_gemm']:.2f}），",
        ),
        rest,
    )
    if row is not None and not 0.8 < row["median_ms"] / p["full_fast_ms"] < 1.25:
        text = _join(
            text,
            (
                f"; the forward rounds measured {row['median_ms']:.1f} ms for the same call, so "
                f"the shared machine's load changed during the run (noise, not the code)",
                f"；而前向计时的轮次里同一次调用测得 {row['median_ms']:.1f} ms，"
                f"说明运行期间这台共享机器的负载变了（是噪声，不是代码的问题）",
            ),
        )
    return text


def _memory_text(res: dict, fast: dict, ref: dict) -> Text:
    c = res["config"]
    one = c["batch"] * fast["seq_len"] * c["hidden"] * 4 / 2**20  # one [b, L, d] float32 tensor
    scores = c["batch"] * c["heads"] * fast["seq_len"] ** 2 * 4 / 2**20  # one [b, h, L, L] tensor
    seq, grew, ref_mb = fast["seq_len"], fast["peak_growth_mb"], ref["peak_growth_mb"]
    return (
        f"at seq_len {seq} full-fast grew {grew:.0f} MB, "
        f"{grew / one:.1f} times one [batch, seq_len, hidden] tensor "
        f"({one:.0f} MB: the input, q, k, v, the attention output and its merged copy are each "
        f"that size), while nn.MultiheadAttention grew {ref_mb:.0f} MB "
        f"({ref_mb / scores:.1f} times one [batch, heads, L, L] score tensor of "
        f"{scores:.0f} MB); the target needs those activation-sized tensors to stay under a "
        f"tenth of what nn.MultiheadAttention keeps",
        f"seq_len {seq} 时 full-fast 的内存增长了 {grew:.0f} MB，是一个 [batch, seq_len, hidden] "
        f"张量（{one:.0f} MB：输入、q、k、v、注意力输出和合并各头后的副本都是这么大）的 "
        f"{grew / one:.1f} 倍；nn.MultiheadAttention 增长了 {ref_mb:.0f} MB，是一个 "
        f"{scores:.0f} MB 的 [batch, heads, L, L] 分数张量的 {ref_mb / scores:.1f} 倍。目标要求这些"
        f"与激活值同样大小的张量加起来，不到 nn.MultiheadAttention 所占内存的十分之一",
    )


def _masked_text(res: dict, masked: dict) -> Text:
    c = res["config"]
    seq = masked["seq_len"]
    mask_mb = c["batch"] * seq**2 / 2**20  # one [batch, 1, L, L] boolean mask
    grew, plain = masked["peak_growth_mb"], masked["unmasked_mb"]
    return (
        f"at seq_len {seq} full-fast grew {grew:.0f} MB with a [batch, 1, 1, L] padding mask "
        f"and {plain:.0f} MB without; the mask expanded to [batch, 1, L, L] would be "
        f"{mask_mb:.0f} MB as booleans and four times that as the kernel's float copy",
        f"seq_len {seq} 时，带 [batch, 1, 1, L] 填充掩码的 full-fast 内存增长 {grew:.0f} MB，"
        f"不带掩码时 {plain:.0f} MB；掩码若扩展成 [batch, 1, L, L]，布尔型就有 {mask_mb:.0f} MB，"
        f"算子转成的浮点副本又是它的四倍",
    )


def _causal_text(fwd: list, seq: int) -> Text:
    fc, fp = _pick(fwd, "full-fast", seq, True), _pick(fwd, "full-fast", seq)
    tc, tp = _pick(fwd, "torch", seq, True), _pick(fwd, "torch", seq)
    share = fc["median_ms"] / fp["median_ms"]
    torch_share = tc["median_ms"] / tp["median_ms"]
    skip = (
        ("the kernel skips the blocks above the diagonal", "算子跳过了对角线以上的块")
        if share < 1
        else ("no saving here", "这里没有省下时间")
    )
    short = seq < 512
    return (
        f"at seq_len {seq} full-fast causal takes {fc['median_ms']:.1f} ms "
        f"({share:.2f} of its non-causal time: {skip[0]}), nn.MultiheadAttention with the causal "
        f"mask {tc['median_ms']:.1f} ms ({torch_share:.2f} of its non-causal time)"
        + (
            "; at this short length fixed per-call costs are a large share of both" if short else ""
        ),
        f"seq_len {seq} 时，带因果掩码的 full-fast 用时 {fc['median_ms']:.1f} ms（是不带掩码时的 "
        f"{share:.2f}：{skip[1]}），带因果掩码的 nn.MultiheadAttention 用时 "
        f"{tc['median_ms']:.1f} ms"
        f"（是它不带掩码时的 {torch_share:.2f}）"
        + ("；这么短的长度下，每次调用的固定开销在两者中都占了很大比重" if short else ""),
    )


def _full_fast_at(rows: list, wanted: int) -> tuple[dict | None, Text]:
    """full-fast's row of a section at ``wanted`` (or the longest length measured), and the note
    that says so; ``None`` if the section has no full-fast row there."""
    seqs = sorted({r["seq_len"] for r in rows})
    if not seqs:
        return None, ("", "")
    seq, note = _at(wanted, seqs)
    return _pick(rows, "full-fast", seq), note


def check_targets(res: dict, parts: list) -> list:
    targets = []
    fwd = res["forward"]
    seqs = sorted({r["seq_len"] for r in fwd if "dtype" not in r})

    def add(name: Text, value, op, bound, why_missed: Text, label: Text = ("", "")):
        """One target: ``value`` must be ``op`` (``<=`` or ``>=``) ``bound``."""
        target = f"{op} {bound}{label[0]}"
        met = value <= bound if op == "<=" else value >= bound
        if any(t["name"] == name[0] and t["target"] == target for t in targets):
            return  # a reduced run checks several targets at the same length: list it once
        targets.append(
            {
                "name": name[0],
                "name_zh": name[1],
                "value": value,
                "target": target,
                "target_zh": f"{op} {bound}{label[1]}",
                "met": bool(met),
                "why": None if met else why_missed[0],
                "why_zh": None if met else why_missed[1],
            }
        )

    for wanted, limit in ((1024, 0.72), (2048, 0.66)):
        seq, note = _at(wanted, seqs)
        r = _pick(fwd, "full-fast", seq)
        over = r["ratio_vs_torch"] / limit - 1
        add(
            (
                f"full-fast forward time / nn.MultiheadAttention at seq_len {seq}",
                f"seq_len {seq} 时 full-fast 前向用时 / nn.MultiheadAttention",
            ),
            r["ratio_vs_torch"],
            "<=",
            limit,
            _join(
                (
                    f"{over:.1%} over the target against nn.MultiheadAttention measured in the "
                    "same rounds; ",
                    f"比目标多 {over:.1%}（与同一轮次里测得的 nn.MultiheadAttention 相比）；",
                ),
                _parts_text(parts, seq, r),
                note,
            ),
        )
    for wanted in (1024, 2048, 4096):
        seq, note = _at(wanted, seqs)
        r = _pick(fwd, "full-fast", seq)
        if r is None:
            continue
        add(
            (
                f"full-fast forward fraction of the same-run GEMM rate at seq_len {seq}",
                f"seq_len {seq} 时 full-fast 前向达到同一次运行里 GEMM 速率的比例",
            ),
            r["fraction_of_gemm"],
            ">=",
            0.85,
            _join(_parts_text(parts, seq, r), note),
        )
    mem = res["memory"]
    r, note = _full_fast_at(mem, 4096)
    if r is not None:
        seq = r["seq_len"]
        add(
            (
                f"full-fast peak memory growth / nn.MultiheadAttention at seq_len {seq}",
                f"seq_len {seq} 时 full-fast 峰值内存增长 / nn.MultiheadAttention",
            ),
            r["ratio_vs_torch"],
            "<=",
            0.1,
            _join(_memory_text(res, r, _pick(mem, "torch", seq)), note),
        )
    r, note = _full_fast_at(res.get("memory_masked", []), 4096)
    if r is not None:
        seq = r["seq_len"]
        add(
            (
                f"full-fast peak memory growth with a [batch, 1, 1, L] padding mask / "
                f"without, at seq_len {seq}",
                f"seq_len {seq} 时 full-fast 带 [batch, 1, 1, L] 填充掩码与不带掩码的峰值内存"
                f"增长之比",
            ),
            r["ratio_vs_unmasked"],
            "<=",
            1.1,
            _join(_masked_text(res, r), note),
        )
    seq, note = _at(2048, seqs)
    r = _pick(fwd, "full-fast", seq, causal=True)
    add(
        (
            f"full-fast causal forward time / nn.MultiheadAttention causal at seq_len {seq}",
            f"seq_len {seq} 时 full-fast 因果前向用时 / nn.MultiheadAttention 因果前向用时",
        ),
        r["ratio_vs_torch"],
        "<=",
        0.3,
        _join(_causal_text(fwd, seq), note),
    )
    if res["decode"]:
        d = next((r for r in res["decode"] if r["seq_len"] == 1024), res["decode"][-1])
        add(
            (
                f"KV-cache decoding speed-up per position at seq_len {d['seq_len']}",
                f"seq_len {d['seq_len']} 时 KV 缓存解码每个位置的加速比",
            ),
            d["speedup"],
            ">=",
            30,
            (
                f"one cached step takes {d['cache_ms']:.2f} ms against {d['recompute_ms']:.2f} "
                f"ms for the whole causal forward; the step's work is per-call overhead (checks, "
                f"four projections of one position, the module calls) plus reading the whole "
                f"cache, and at short lengths the whole forward is cheap too",
                f"带缓存的一步用时 {d['cache_ms']:.2f} ms，整个因果前向计算用时 "
                f"{d['recompute_ms']:.2f} ms；一步的工作是每次调用的固定开销（检查、一个位置的"
                f"四个投影、模块调用）加上读一遍整个缓存，而长度短时整个前向计算本身也不贵",
            ),
        )
    if res["gqa"]:
        h = res["gqa"][0]["heads"]
        g = next((r for r in res["gqa"] if r["kv_heads"] * 4 == h), None)
        if g is not None:
            add(
                (
                    f"GQA cache memory, kv_heads = {g['kv_heads']} of {h} heads, / full heads",
                    f"分组查询注意力的缓存内存（{h} 个头中 kv_heads = {g['kv_heads']}）/ 键/值头数"
                    f"与查询头数相同时",
                ),
                g["cache_ratio_vs_full"],
                "<=",
                0.25,
                (
                    "the cache holds more than kv_heads heads of keys and values",
                    "缓存里存的键和值多于 kv_heads 个头",
                ),
                label=(" (saves 3/4)", "（省下 3/4）"),
            )
    return targets


# ---------------------------------------------------------------------------- output


def machine(device: str) -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    if device.startswith("cuda"):
        dev = f"cuda ({torch.cuda.get_device_name()})"
    else:
        dev = "cpu"
    return {
        "cpu": cpu,
        "cores": os.cpu_count() or 1,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": dev,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def table(res: dict) -> str:
    lines = []
    m = res["machine"]
    lines.append(
        f"{m['cpu']}, {m['cores']} cores, {m['threads']} threads, torch {m['torch']}, "
        f"{m['device']}; batch {res['config']['batch']}, hidden {res['config']['hidden']}, "
        f"heads {res['config']['heads']}, {res['config']['dtype']}; same-run GEMM "
        f"{res['gemm_gflops']:.1f} GFLOP/s (median over lengths)"
    )
    lines.append("")
    lines.append(
        "Forward (inference mode), median ms, ratio to nn.MultiheadAttention, GEMM fraction"
    )
    lines.append(f"{'impl':<18}{'seq':>6}{'ms':>11}{'x torch':>9}{'GFLOP/s':>9}{'of GEMM':>9}")
    for r in res["forward"]:
        name = (
            r["impl"]
            + (" causal" if r["causal"] else "")
            + (f" {r['dtype']}" if "dtype" in r else "")
        )
        lines.append(
            f"{name:<18}{r['seq_len']:>6}{r['median_ms']:>11.2f}{r['ratio_vs_torch']:>9.2f}"
            f"{r['gflops']:>9.1f}{r['fraction_of_gemm']:>9.2f}"
        )
    lines.append("")
    lines.append("Forward + backward, median ms, ratio to nn.MultiheadAttention")
    for r in res["backward"]:
        lines.append(
            f"{r['impl']:<18}{r['seq_len']:>6}{r['median_ms']:>11.2f}{r['ratio_vs_torch']:>9.2f}"
        )
    lines.append("")
    lines.append(
        "Peak memory growth of one forward (fresh process), MB, ratio to nn.MultiheadAttention"
    )
    for r in res["memory"]:
        lines.append(
            f"{r['impl']:<18}{r['seq_len']:>6}{r['peak_growth_mb']:>11.1f}"
            f"{r['ratio_vs_torch']:>9.3f}"
        )
    lines.append("")
    lines.append("KV-cache decoding of one position vs recomputing the causal forward")
    for r in res["decode"]:
        lines.append(
            f"seq_len {r['seq_len']}: cache {r['cache_ms']:.2f} ms, recompute "
            f"{r['recompute_ms']:.2f} ms, speed-up {r['speedup']:.1f}x"
        )
    lines.append("")
    lines.append("Grouped-query attention (causal forward)")
    for r in res["gqa"]:
        lines.append(
            f"heads {r['heads']}, kv_heads {r['kv_heads']}: "
            f"cache {r['cache_bytes'] / 2**20:.1f} MB "
            f"({r['cache_ratio_vs_full']:.2f} of full heads), {r['median_ms']:.2f} ms"
        )
    lines.append("")
    lines.append("Targets")
    for t in res["targets"]:
        state = "met" if t["met"] else "MISSED"
        lines.append(f"[{state}] {t['name']}: {t['value']:.3g} (target {t['target']})")
        if t["why"]:
            lines.append(f"         why: {t['why']}")
    if res["notes"]:
        lines.append("")
        lines.append("Notes")
        lines.extend(f"- {n}" for n in res["notes"])
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m mha.bench", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, few repeats (seconds)")
    p.add_argument("--out", type=Path, default=None, help=f"JSON file (default {DEFAULT_OUT})")
    p.add_argument("--seq", type=str, default=None, help="comma-separated lengths (64,...,4096)")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds per configuration")
    p.add_argument("--mem-seq", type=str, default=None, help="lengths for memory (default --seq)")
    p.add_argument(
        "--max-call", type=float, default=4.0, help="stop an impl after a call > this (s)"
    )
    p.add_argument("--max-backward-math-seq", type=int, default=2048)
    p.add_argument("--max-memory-math-seq", type=int, default=4096)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--retarget",
        type=Path,
        default=None,
        help="recheck the targets of a results file (no timing) and rewrite it",
    )
    p.add_argument(
        "--memory-into",
        type=Path,
        default=None,
        help="measure only the peak memory (the other sections' sizes and lengths from this "
        "results file), replace that file's memory sections and recheck its targets",
    )
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--device", type=str, default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", type=str, default="float32", help=argparse.SUPPRESS)
    p.add_argument("--child", choices=IMPLS, default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-seq", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument(
        "--child-mask", choices=("none", "padding"), default="none", help=argparse.SUPPRESS
    )
    args = p.parse_args(argv)
    if args.quick:
        args.batch, args.hidden, args.heads = 2, 64, 8
        default_seq, repeats = "16,32", 3
        args.decode_seq, args.gqa_seq, args.parts_from = [16, 32], 32, 32
        args.mem_seq = args.mem_seq or "32"
    else:
        default_seq, repeats = "64,128,256,512,1024,2048,4096", 7
        args.decode_seq, args.gqa_seq, args.parts_from = [256, 1024, 4096], 1024, 1024
    args.seq = [int(s) for s in (args.seq or default_seq).split(",") if s.strip()]
    if not args.seq or any(s < 2 for s in args.seq):
        p.error(f"--seq needs lengths >= 2, got {args.seq}")
    if args.mem_seq is None:
        args.mem_seq = args.seq
    elif isinstance(args.mem_seq, str):
        args.mem_seq = [int(s) for s in args.mem_seq.split(",") if s.strip()]
    args.repeats = args.repeats or repeats
    args.repeats_backward = max(3, args.repeats // 2 + 1)
    args.warmup = 1 if args.quick else 2
    return args


def memory_into(args: argparse.Namespace) -> dict:
    """Re-measure the memory sections of an existing results file, with its sizes and lengths,
    and say so in its notes: memory does not depend on the machine's load as time does."""
    path = args.memory_into
    res = json.loads(path.read_text(encoding="utf-8"))
    c = res["config"]
    args.batch, args.hidden, args.heads = c["batch"], c["hidden"], c["heads"]
    args.mem_seq, args.quick = c["memory_seq_lens"], c["quick"]
    notes = [n for n in res["notes"] if not n.startswith("memory")]
    progress = Progress(len(args.mem_seq) * (len(IMPLS) + len(MASKED_IMPLS)), not args.no_progress)
    res["memory"], res["memory_masked"] = bench_memory(args, progress, notes)
    progress.close()
    date = machine(args.device)["date"]
    notes.append(
        f"memory: both memory tables re-measured on {date} (--memory-into), on the same machine "
        f"and sizes; the other sections are from the run of {res['machine']['date']}"
    )
    res["notes"] = notes
    res["targets"] = check_targets(res, res.get("parts", []))
    path.write_text(json.dumps(res, indent=1, allow_nan=False) + "\n", "utf-8")
    print(table(res))
    return res


def main(argv: list[str] | None = None) -> dict | None:
    args = parse(argv)
    if args.child:
        child(args)
        return None
    if args.retarget:
        res = json.loads(args.retarget.read_text(encoding="utf-8"))
        res["targets"] = check_targets(res, res.get("parts", []))
        args.retarget.write_text(json.dumps(res, indent=1, allow_nan=False) + "\n", "utf-8")
        print(table(res))
        return res
    if args.memory_into:
        return memory_into(args)
    device = args.device
    dtype = torch.float32
    notes: list[str] = []
    dtypes = [("float32", torch.float32)]
    if device.startswith("cuda"):
        dtypes += [("float16", torch.float16), ("bfloat16", torch.bfloat16)]
    else:
        notes.append("float16/bfloat16 rows are measured on a CUDA device only; this run is on CPU")
    total = (
        len(args.seq) * (len(dtypes) + 1)
        + len([s for s in args.seq if s >= args.parts_from])
        + len(args.decode_seq)
        + 1
        + len(args.mem_seq) * (len(IMPLS) + len(MASKED_IMPLS))
    )
    progress = Progress(total, enabled=not args.no_progress)
    started = time.perf_counter()
    forward, gemm = [], []
    for name, dt in dtypes:
        models = build_models(args.hidden, args.heads, device, dt)
        rows, g = bench_forward(args, device, dt, models, progress, notes, name)
        forward += rows
        gemm += g
    models = build_models(args.hidden, args.heads, device, dtype)
    parts = bench_parts(args, device, dtype, models, progress)
    backward = bench_backward(args, device, dtype, models, progress, notes)
    decode = bench_decode(args, device, dtype, models, progress)
    gqa = bench_gqa(args, device, dtype, progress)
    memory, memory_masked = bench_memory(args, progress, notes)
    progress.close()
    full = [64, 128, 256, 512, 1024, 2048, 4096]
    if not args.quick and (args.seq != full or args.mem_seq != full or args.repeats < 7):
        notes.append(
            f"reduced run: timed over seq_len {args.seq}, memory over {args.mem_seq}, "
            f"{args.repeats} repeats (the full run: 64..4096 for both, 7 repeats)"
        )
    notes.append(
        "FLOPs: 4 projections 4*2*b*L*d^2 plus 2 attention products 2*2*b*L^2*d; causal rows are "
        "counted with the same FLOPs although the kernel may skip the masked half"
    )
    res = {
        "machine": machine(device),
        "config": {
            "batch": args.batch,
            "hidden": args.hidden,
            "heads": args.heads,
            "dtype": "float32",
            "repeats": args.repeats,
            "quick": bool(args.quick),
            "seq_lens": args.seq,
            "memory_seq_lens": args.mem_seq,
            "warmup": args.warmup,
            "repeats_backward": args.repeats_backward,
            "repeats_by_seq": {str(q): reps(args, q) for q in args.seq},
            "repeats_note": "forward rounds per length (backward scaled alike); "
            "decoding 4x and GQA 2x the base",
        },
        "gemm_gflops": statistics.median(r["gflops"] for r in gemm if r["dtype"] == "float32"),
        "gemm": gemm,
        "forward": forward,
        "backward": backward,
        "memory": memory,
        "memory_masked": memory_masked,
        "decode": decode,
        "gqa": gqa,
        "parts": parts,
        "notes": notes,
    }
    res["targets"] = check_targets(res, parts)
    res["seconds"] = time.perf_counter() - started
    out = args.out or (Path("bench-quick.json") if args.quick else DEFAULT_OUT)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    print(table(res))
    print(f"\nwritten to {out} in {res['seconds']:.0f} s")
    return res


if __name__ == "__main__":
    main()
