# ruff: noqa: E501
"""Shared by the tests: the design post's class (verbatim) and an independent reference.

``DESIGN_SOURCE`` is the design post's code (the Chinese blog post the site starts from, as
quoted on the site's annotated page), copied character for character -- it is the seed this project explains, NOT our code. It is kept as a
string so no formatter can touch it, and executed once to give ``DesignMHA``. Tests use it to show
that a state_dict saved from the post's class loads unchanged into ours, and that the shape-comment
checker finds the post's wrong ``.view`` comment.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor


# ---- The design post's code, verbatim (the seed we explain; not ours) --------------------------
def design_sizes(batch_size: int, seq_len: int, heads_num: int, head_size: int) -> dict[str, int]:
    """The design's dimension names and their sizes (``hidden_size`` = ``heads_num * head_size``)."""
    return {
        "batch_size": batch_size,
        "seq_len": seq_len,
        "heads_num": heads_num,
        "head_size": head_size,
        "hidden_size": heads_num * head_size,
    }


DESIGN_SOURCE = """\
import torch
import torch.nn as nn

#hidden_size:隐藏层维度
#head_num:注意力头数
#必须保证hidden_size可被head_num整除,否则会报错

class MHA(nn.Module):
    def __init__(self, hidden_size, heads_num):
        super().__init__() #python2环境则需改为super(MHA, self).__init__()
        self.hidden_size = hidden_size
        self.heads_num = heads_num
        self.head_size = hidden_size//heads_num

        # 线性变换矩阵
        # W_q(x)相当于x乘以[W_q_0,W_q_1,...,W_q_(heads_num-1)]矩阵,得到每个头的q值拼接后的结果
        # 同理W_k(x)和W_v(x)也相当于x乘以[W_k_0,W_k_1,...,W_k_(heads_num-1)]和[W_v_0,W_v_1,...,W_v_(heads_num-1)]矩阵,
        # 得到每个头的k值和v值拼接后的结果
        self.W_q = nn.Linear(hidden_size,hidden_size)
        self.W_k = nn.Linear(hidden_size,hidden_size)
        self.W_v = nn.Linear(hidden_size,hidden_size)

        self.W_o = nn.Linear(hidden_size,hidden_size)
    # x:输入序列，[batch_size, seq_len, hidden_size]
    def forward(self, x):
        q = self.W_q(x) # [batch_size, seq_len, hidden_size]
        k = self.W_k(x) # [batch_size, seq_len, hidden_size]
        v = self.W_v(x) # [batch_size, seq_len, hidden_size]

        # 将q、k、v分成多个头，每个头的维度为head_size
        q = q.view(q.size(0), q.size(1), self.heads_num, self.head_size) # [batch_size, heads_num, seq_len, head_size]
        k = k.view(k.size(0), k.size(1), self.heads_num, self.head_size) # [batch_size, heads_num, seq_len, head_size]
        v = v.view(v.size(0), v.size(1), self.heads_num, self.head_size) # [batch_size, heads_num, seq_len, head_size]

        # 翻转heads_num, seq_len维度，使得后续计算每个头更方便
        q = q.transpose(1,2) # [batch_size, heads_num, seq_len, head_size]
        k = k.transpose(1,2) # [batch_size, heads_num, seq_len, head_size]
        v = v.transpose(1,2) # [batch_size, heads_num, seq_len, head_size]

        # torch.matmul(q, k.transpose(-2,-1))相当于每个头的q值矩阵和k值矩阵的转置相乘得到每个头的注意力权重矩阵
        qk = torch.matmul(q, k.transpose(-2,-1))/torch.sqrt(torch.tensor(self.head_size, dtype = torch.float32))# [batch_size, heads_num, seq_len, seq_len]
        # 对每个头的注意力权重矩阵进行softmax归一化
        attn = torch.softmax(qk, dim=-1) # [batch_size, heads_num, seq_len, seq_len]

        # 将每个头的注意力权重矩阵和v值矩阵相乘得到每个头的输出矩阵
        out = torch.matmul(attn, v) # [batch_size, heads_num, seq_len, head_size]
        # 将每个头的输出矩阵拼接起来得到最终的输出矩阵
        # .contiguous() 时，PyTorch 会按照张量的逻辑形状，重新在内存中排列元素；返回一个新的、内存连续的张量
        # 如果省略 .contiguous()，直接执行 view 会抛出报错：
        # 核心原因：view 要求张量在内存中是连续的，否则无法按指定形状重塑。
        out = out.transpose(1,2).contiguous().view(out.size(0),out.size(2), self.hidden_size) # [batch_size, seq_len, hidden_size])
        # 最后通过线性变换矩阵W_o得到最终的输出
        out = self.W_o(out) # [batch_size, seq_len, hidden_size]

        return out
"""
# ---- end of the design post's code --------------------------------------------------------------

DESIGN_FILENAME = "<design post>"


def exec_module_source(source: str, filename: str) -> dict:
    """Execute module source text in a fresh namespace and return that namespace."""
    namespace: dict = {"__name__": f"exec:{filename}"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


DesignMHA = exec_module_source(DESIGN_SOURCE, DESIGN_FILENAME)["MHA"]


def reference_attention(m, x: Tensor) -> Tensor:
    """Multi-head self-attention written independently with ``F.scaled_dot_product_attention``.

    Uses only ``m``'s four linear layers and ``m.heads_num``; splits heads with ``unflatten`` and
    merges them with ``flatten`` instead of ``view``/``transpose``/``contiguous``, and lets SDPA
    choose its own scale (``1 / sqrt(head_size)``).
    """
    heads = m.heads_num

    def split(t: Tensor) -> Tensor:  # [b, s, h] -> [b, heads, s, h / heads]
        return t.unflatten(-1, (heads, -1)).movedim(-2, 1)

    q, k, v = split(m.W_q(x)), split(m.W_k(x)), split(m.W_v(x))
    out = F.scaled_dot_product_attention(q, k, v)
    return m.W_o(out.movedim(1, -2).flatten(-2))


def raised_in_mha(excinfo) -> bool:
    """The error of ``pytest.raises`` comes from a ``raise`` of the package's checks
    (``mha/checks.py`` or ``mha/full.py``), not from deep inside torch. The statement matters: a
    torch function written in C adds no Python frame, so its error seems to come from the line
    of ``mha`` that called it."""
    entry = excinfo.traceback[-1]
    in_mha = entry.path.parent.name == "mha" and entry.path.name in ("checks.py", "full.py")
    return in_mha and str(entry.statement).lstrip().startswith("raise ")


# Autocast configurations: CPU bfloat16 here, CUDA float16 where a GPU is present.
AUTOCAST_CASES = [
    pytest.param("cpu", torch.bfloat16, id="cpu-bfloat16"),
    pytest.param(
        "cuda",
        torch.float16,
        id="cuda-float16",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    ),
]
