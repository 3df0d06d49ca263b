"""Process-group set-up for ``torchrun`` and the few collectives the trainer needs.

Under ``torchrun --nproc_per_node=N script.py`` every worker gets ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` in its environment;
:func:`init_distributed` reads them and joins the group (``gloo`` on CPU, ``nccl`` when CUDA is
available). Without those variables it returns a one-process :class:`DistInfo` and every
collective below is a no-op, so the same code runs on a laptop and on several machines.

Every collective here works on tensors (never ``*_object`` variants), so nothing is pickled.
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from muppets.errors import ConfigError

logger = logging.getLogger(__name__)

_REQUIRED_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job.

    Attributes:
        rank: global rank, ``0 .. world - 1``.
        world: number of processes.
        local_rank: rank on this machine (selects the GPU under CUDA).
        is_main: True on rank 0, the only rank that logs and writes files.
    """

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    is_main: bool = True


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as err:
        raise ConfigError(f"environment variable {name}={raw!r} is not an integer") from err


def dist_info() -> DistInfo:
    """The current process's place, from the initialised group (or one process if none)."""
    if not (dist.is_available() and dist.is_initialized()):
        return DistInfo()
    rank, world = dist.get_rank(), dist.get_world_size()
    local = _env_int("LOCAL_RANK", rank)
    return DistInfo(rank=rank, world=world, local_rank=local, is_main=rank == 0)


def init_distributed(backend: str | None = None) -> DistInfo:
    """Join the ``torchrun`` process group if the environment asks for one; idempotent.

    Args:
        backend: ``"gloo"`` or ``"nccl"``; by default nccl when CUDA is available, else gloo.

    Raises:
        ConfigError: ``WORLD_SIZE > 1`` but a variable torchrun sets is missing or malformed.
    """
    if dist.is_available() and dist.is_initialized():
        return dist_info()
    world = _env_int("WORLD_SIZE", 1)
    if world <= 1:
        return DistInfo()
    missing = [name for name in _REQUIRED_ENV if name not in os.environ]
    if missing:
        raise ConfigError(f"WORLD_SIZE={world} but {', '.join(missing)} not set; launch with torchrun")
    local = _env_int("LOCAL_RANK", 0)
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local)
    dist.init_process_group(backend=backend, init_method="env://")
    # A process that exits with the group still joined leaves gloo's worker threads to be torn
    # down during interpreter finalisation, which can abort (SIGABRT) after a run that succeeded;
    # leaving it while Python is still whole avoids that. No barrier here: on an error path the
    # other ranks may never arrive. (After a command that succeeded the CLI leaves first, with a
    # barrier, shutdown_distributed, then ends without finalisation, where the abort was still
    # seen after the group was gone: muppets.cli._end_torchrun_worker.)
    atexit.register(_leave_group)
    info = dist_info()
    warning = restart_warning(os.environ)
    if warning and info.is_main:
        logger.warning(warning)
    logger.info("joined process group: rank %d of %d (backend %s, master %s:%s)", info.rank, info.world, backend,
                os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
    return info


def restart_warning(env: Mapping[str, str]) -> str | None:
    """What to tell a job that torchrun may restart while sharing its rendezvous store.

    With ``--max-restarts`` above 0 and the c10d rendezvous, torchrun (2.13) lends the workers
    the agents' own store; after a worker dies, the restarted workers can read the failed
    round's addresses from it and fail to connect (pytorch/pytorch#135712: each node counts
    its restarts itself, so their keys stop matching). ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``
    on every node gives each round a store of its own; the two-node rehearsal restarts with it
    every time (docs/concepts/multi-node.md)."""
    if env.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or env.get("TORCHELASTIC_MAX_RESTARTS", "0") in ("", "0"):
        return None
    return ("torchrun may restart this job (--max-restarts) but shares its rendezvous store with the workers: "
            "a restart can then fail to reconnect (pytorch/pytorch#135712); start torchrun with "
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in its environment on every node")


def shutdown_distributed() -> None:
    """Leave the process group after a run that succeeded (no-op when none was joined).

    Every rank first waits at a barrier, so none tears down its connections while a peer's last
    collective is still in flight.
    """
    if dist.is_available() and dist.is_initialized():
        barrier()
        dist.destroy_process_group()


def _leave_group() -> None:
    """The exit hook: leave the group if the program did not (no barrier, see init_distributed)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _comm_device() -> torch.device:
    """nccl only moves CUDA tensors; gloo works on CPU tensors."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over ranks; returns the sum on ``tensor``'s device. No-op with one process."""
    if not _active():
        return tensor
    moved = tensor.to(_comm_device())
    dist.all_reduce(moved, op=dist.ReduceOp.SUM)
    return moved.to(tensor.device)


def any_rank(flag: bool) -> bool:
    """True when ``flag`` is True on at least one rank (so every rank takes the same branch)."""
    if not _active():
        return flag
    value = torch.tensor([1 if flag else 0], dtype=torch.int64, device=_comm_device())
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def all_gather(tensor: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's copy of ``tensor`` (same shape and dtype on all ranks), in rank order."""
    if not _active():
        return [tensor]
    moved = tensor.to(_comm_device()).contiguous()
    out = [torch.empty_like(moved) for _ in range(dist.get_world_size())]
    dist.all_gather(out, moved)
    return [t.to(tensor.device) for t in out]


def barrier() -> None:
    """Wait until every rank gets here (no-op with one process)."""
    if _active():
        dist.barrier()


def rank_shares(batch_size: int, world: int, accumulation: int) -> tuple[int, int]:
    """Examples per rank and per micro-batch of a global batch; it must divide evenly."""
    if batch_size % (world * accumulation):
        raise ConfigError(f"batch_size {batch_size} is not divisible by world size {world}"
                          f" x accumulation {accumulation}")
    per_rank = batch_size // world
    return per_rank, per_rank // accumulation


def micro_batch_ranges(step: int, rank: int, world: int, batch_size: int, accumulation: int) -> list[range]:
    """Global example numbers (``g = step * batch_size + i``) of this rank's micro-batches of
    update ``step``: the rank's contiguous share of the global batch, cut into ``accumulation``."""
    per_rank, per_micro = rank_shares(batch_size, world, accumulation)
    first = step * batch_size + rank * per_rank
    return [range(first + k * per_micro, first + (k + 1) * per_micro) for k in range(accumulation)]
