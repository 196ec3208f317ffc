"""How a training run spreads over the processes `torchrun` starts.

Owns: `World` (this process's rank among how many, and the process group: gloo on CPU, NCCL on
CUDA with process r on GPU LOCAL_RANK), how the model is spread (`spread`: one replica per
process under DistributedDataParallel, or with `--fsdp` one shard per process under torch's
FSDP2 `fully_shard`), which backward pass synchronises the gradients (`synced`: a step's last
micro-batch's), and the state that checkpoints and the output file take: the whole model's and
AdamW's, as one process would hold them, on rank 0 (`full_state`, `load_full_state`, through
`torch.distributed.checkpoint.state_dict`, which gathers FSDP's shards and cuts them again).
Leaves out: the steps (train.py), writing files (save.py, and train.py's checkpoints).

With `--fsdp` the model is one FSDP unit, `fully_shard(model)`: between steps each process holds
1/W of every parameter, gradient and AdamW moment; for a step's forward and backward passes the
parameters are all-gathered whole, and the gradients reduce-scattered back into shards,
averaged over the processes as DDP averages them. A unit per block (`blk.0.`, `blk.1.`, …) would
gather one block at a time, but FSDP gathers a unit in its module's forward hook, and a
generated forward reads every weight from the top module's forward (`self.w["blk.0.attn_q.weight"]`,
never `self.blk[0](X)`): after `fully_shard` on `blk.0` its weights are still shards when read
(RuntimeError: aten.mul.Tensor got mixed torch.Tensor and DTensor).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch

from toycards.errors import ToycardsError

FSDP_COMMAND = "torchrun --nproc-per-node N -m toycards train … --fsdp"


@dataclass
class World:
    """This process among those torchrun started (rank 0 of 1 without torchrun)."""

    rank: int = 0
    size: int = 1

    @classmethod
    def from_env(cls, device: str, fsdp: bool = False) -> World:
        """The process group torchrun's variables describe (none for a single process, unless
        `fsdp`, which needs one); `fsdp` without torchrun is a one-line error."""
        if "WORLD_SIZE" not in os.environ:
            if fsdp:
                raise ToycardsError(
                    f"--fsdp shards the model over the processes torchrun starts: run {FSDP_COMMAND}"
                )
            return cls()
        if int(os.environ["WORLD_SIZE"]) <= 1 and not fsdp:
            return cls()
        import torch.distributed as dist

        if device == "cuda":  # process r on its own GPU, r's LOCAL_RANK (NCCL needs one per process)
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
        return cls(dist.get_rank(), dist.get_world_size())

    def sum(self, value: float) -> float:
        """`value` summed over the processes (in float64)."""
        if self.size == 1:
            return value
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t.item())

    def mean(self, value: float) -> float:
        return self.sum(value) / self.size

    def any(self, flag: bool) -> bool:
        return self.mean(float(flag)) > 0

    def barrier(self) -> None:
        if self.size > 1:
            import torch.distributed as dist

            dist.barrier()


def spread(model: torch.nn.Module, world: World, fsdp: bool, device: str) -> torch.nn.Module:
    """The module a step runs: the model (one process), DistributedDataParallel around it, or,
    with `fsdp`, the model itself sharded in place by `fully_shard` over all the processes (its
    parameters become DTensor shards; build the optimizer after this)."""
    if fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.split(":")[0], (world.size,))  # the model's device, not the default
        return fully_shard(model, mesh=mesh)
    if world.size > 1:
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)
    return model


def synced(net: torch.nn.Module, world: World, fsdp: bool, last: bool):
    """A context for one micro-batch's backward pass: the gradients are reduced over the
    processes on a step's last micro-batch only (DDP's `no_sync()` before it, FSDP's
    `set_requires_gradient_sync(False)`); the others add into this process's `.grad`."""
    if fsdp:
        net.set_requires_gradient_sync(last)
    elif world.size > 1 and not last:
        return net.no_sync()
    return contextlib.nullcontext()


def full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None):
    """(the model's state dict, the optimizer's or None), whole and on the CPU, on rank 0 (the
    others may get empty dicts; under FSDP this gathers: every process calls it). The optimizer's is
    keyed by parameter name, so that it loads into a model spread another way; None before its
    first step (it has no state yet, and torch would make one by a step of learning rate 0)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights = get_model_state_dict(model, options=options)
    if optimizer is None or not optimizer.state:
        return weights, None
    return weights, get_optimizer_state_dict(model, optimizer, options=options)


def load_full_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, weights, optimizer_state
) -> None:
    """Load what `full_state` gave (every process loads the whole; FSDP keeps its shard of it)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, weights, options=options)
    if optimizer_state is not None:
        set_optimizer_state_dict(model, optimizer, optimizer_state, options=options)
