"""The process groups of ``mha.parallel``: ``launch`` (forked gloo ranks), and the checks every
split makes before it communicates (the group given, and the ranks' agreement on their inputs).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import Tensor

from mha.checks import check_length


def as_process_group(group: Any) -> dist.ProcessGroup | None:
    """``group`` as a process group: ``None`` (the default group), a ``ProcessGroup``, or a
    one-dimensional ``DeviceMesh`` (its group); when ``torch.distributed`` is initialised, this
    process must be one of its ranks."""
    if hasattr(group, "get_group") and hasattr(group, "ndim"):  # a DeviceMesh
        if group.ndim != 1:
            raise ValueError(f"group: the mesh must have one dimension, got {group.ndim}")
        group = group.get_group()
    if dist.is_available() and group is dist.GroupMember.NON_GROUP_MEMBER:
        # what new_group gives a process it leaves out
        raise ValueError(
            f"group must contain this process: global rank {dist.get_rank()} is not among the "
            "group's ranks (new_group gave it GroupMember.NON_GROUP_MEMBER)"
        )
    if group is not None and not (dist.is_available() and isinstance(group, dist.ProcessGroup)):
        raise TypeError(
            "group must be a torch.distributed.ProcessGroup, a one-dimensional DeviceMesh or "
            f"None, got {type(group).__name__} ({group!r})"
        )
    if group is not None and dist.is_initialized() and dist.get_rank(group) < 0:
        raise ValueError(
            f"group must contain this process: global rank {dist.get_rank()} is not among the "
            f"group's ranks {dist.get_process_group_ranks(group)}"
        )
    return group


def _described(value: Any) -> Any:
    """What the ranks must agree on about ``value``: a tensor's dtype, shape, device type and
    whether it requires a gradient; a plain value itself; anything else its type (and length)."""
    if isinstance(value, Tensor):
        grad = ", requires grad" if value.requires_grad else ""
        return f"{value.dtype} {list(value.shape)} on {value.device.type}{grad}"
    if value is None or isinstance(value, bool | int | float | str):
        return value
    length = f" of length {len(value)}" if hasattr(value, "__len__") else ""
    return f"{type(value).__name__}{length}"


def agree(
    caller: str,
    group: dist.ProcessGroup | None,
    values: dict[str, Any],
    hints: dict[str, str] | None = None,
) -> None:
    """Raise the same ``ValueError`` on every rank of ``group`` when the ranks pass different
    ``values`` (as ``_described`` gives them), with ``hints[name]`` after the values: one
    ``all_gather_object``, so that no rank is left waiting in a collective that another has not
    joined, or aborted by gloo."""
    mine = {name: _described(value) for name, value in values.items()}
    every: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(every, mine, group=group)
    for name in mine:
        seen = [rank_values[name] for rank_values in every]
        odd = next((rank for rank, value in enumerate(seen) if value != seen[0]), None)
        if odd is not None:
            listed = "; ".join(f"rank {rank}: {value}" for rank, value in enumerate(seen))
            raise ValueError(
                f"{caller}: every rank of the group must pass the same {name}; rank {odd} has "
                f"{seen[odd]} where rank 0 has {seen[0]} ({listed})"
                + (f": {hints[name]}" if hints and name in hints else "")
            )


def _launched(rank: int, fn: Callable, world: int, folder: str, args: tuple) -> None:
    torch.set_num_threads(1)  # the ranks share the machine's cores
    dist.init_process_group(
        "gloo", init_method=f"file://{folder}/store", rank=rank, world_size=world
    )
    try:
        torch.save(fn(rank, world, *args), os.path.join(folder, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def launch(fn: Callable[..., Any], world: int, *args: Any) -> list[Any]:
    """Run ``fn(rank, world, *args)`` on ``world`` processes joined in a gloo process group.

    The processes are forked from this one (no new interpreter, no ``torchrun``), each limited to
    one thread, and join the group through a file in a temporary folder. What ``fn`` returns is
    saved with ``torch.save`` and read back here.

    Args:
        fn: called in each process as ``fn(rank, world, *args)``, after the group is initialised.
        world: the processes.
        *args: passed on to ``fn``.

    Returns:
        What ``fn`` returned on each rank, in rank order.

    Raises:
        RuntimeError: this platform cannot fork processes (Windows); use ``torchrun``.

    中文:
        在 ``world`` 个加入同一个 gloo 进程组的进程里运行 ``fn(rank, world, *args)``。

        这些进程从当前进程 fork 出来（不启动新的解释器，也不用 ``torchrun``），各自只用一个线程，
        通过临时文件夹里的一个文件加入进程组。``fn`` 的返回值用 ``torch.save`` 保存，再在这里读回。

        参数：
            fn: 进程组初始化之后，在每个进程里以 ``fn(rank, world, *args)`` 调用。
            world: 进程数。
            *args: 传给 ``fn`` 的参数。

        返回：
            各进程上 ``fn`` 的返回值，按进程编号排列。

        异常：
            RuntimeError: 这个平台不能 fork 进程（Windows）；请用 ``torchrun``。
    """
    check_length("world", world, positive=True)
    if "fork" not in mp.get_all_start_methods():
        raise RuntimeError("launch forks processes, which this platform cannot do: use torchrun")
    with tempfile.TemporaryDirectory() as folder:
        mp.start_processes(
            _launched, args=(fn, world, folder, args), nprocs=world, start_method="fork"
        )
        return [
            torch.load(os.path.join(folder, f"{rank}.pt"), weights_only=False)
            for rank in range(world)
        ]
