"""Where a training process runs: its rank among ``torchrun``'s processes and its device, plus the two small
collectives the training skeleton needs (every rank must agree on stopping and on skipping an update).

Launched by ``torchrun`` (env ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) a process joins a process group (gloo on
CPU, nccl on GPU); otherwise it is rank 0 of 1 and the collectives return their input.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    owns_group: bool  # this process created the process group (and destroys it at the end)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def single_process(device: str = "cpu") -> DistEnv:
    """Rank 0 of 1 on ``device``, whatever the environment says (a trainer that does not shard its data)."""
    return DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device(device), owns_group=False)


def setup_distributed(device: str = "auto") -> DistEnv:
    """Read torchrun's environment; join a process group when WORLD_SIZE > 1 (nccl on GPU, gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "auto":
        device = f"cuda:{local}" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    owns = False
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
        owns = True
    return DistEnv(rank=rank, world_size=world, local_rank=local, device=dev, owns_group=owns)


def to_device(batch: Any, device: torch.device) -> Any:
    """Move a batch (anything with ``.to``, or dicts / lists / tuples of them) to ``device``."""
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch.to(device) if hasattr(batch, "to") else batch


def all_max(flags: list[float], env: DistEnv) -> list[float]:
    """The element-wise maximum over ranks (a flag raised on any rank is raised on all)."""
    if not env.distributed:
        return flags
    t = torch.tensor(flags, dtype=torch.float64, device=env.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def all_mean(values: list[float], env: DistEnv) -> list[float]:
    """The element-wise mean over ranks."""
    if not env.distributed:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=env.device)
    dist.all_reduce(t)
    return (t / env.world_size).tolist()
