"""Training: the shared :class:`Trainer` (AdamW groups, warmup schedules, accumulation with exact
loss normalisation, clipping, DDP, atomic safetensors checkpoints with exact resume, jsonl logs
and experiment trackers (TensorBoard, MLflow, W&B: :mod:`muppets.train.trackers`),
``training_curves.png``, a progress bar with the run's ETA).

Typical use (the same script runs alone or under ``torchrun --nproc_per_node=N``)::

    trainer = Trainer(model, data, TrainConfig(steps=1000, batch_size=64), Path("runs/x"))
    result = trainer.train()          # resumes from runs/x/checkpoints/latest if present
"""

from muppets.train.checkpoint import (
    CHECKPOINT_FILES,
    RngState,
    TrainerState,
    checkpoint_name,
    latest_checkpoint,
    load_checkpoint,
    load_model_weights,
    preserved_rng,
    save_checkpoint,
)
from muppets.train.distributed import DistInfo, dist_info, init_distributed, shutdown_distributed
from muppets.train.logger import RunLogger, read_log, step_losses
from muppets.train.optim import build_optimizer, is_no_decay, param_groups
from muppets.train.plots import PLOT_FILE, write_run_plot
from muppets.train.schedule import SCHEDULES, lr_factor
from muppets.train.trainer import (
    LossOutput,
    StepData,
    TrainConfig,
    Trainer,
    TrainResult,
    seed_everything,
)

__all__ = [
    "CHECKPOINT_FILES",
    "PLOT_FILE",
    "DistInfo",
    "LossOutput",
    "RngState",
    "RunLogger",
    "SCHEDULES",
    "StepData",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "TrainerState",
    "build_optimizer",
    "checkpoint_name",
    "dist_info",
    "init_distributed",
    "is_no_decay",
    "latest_checkpoint",
    "load_checkpoint",
    "load_model_weights",
    "lr_factor",
    "param_groups",
    "preserved_rng",
    "read_log",
    "save_checkpoint",
    "seed_everything",
    "shutdown_distributed",
    "step_losses",
    "write_run_plot",
]
