"""Multi-task learning: tasks trained together on shared (hard) or tied (soft) encoders.

* :mod:`~muppets.multitask.samplers` — which task an alternating step trains;
* :mod:`~muppets.multitask.weighting` — fixed, uncertainty, GradNorm and DWA task weights;
* :mod:`~muppets.multitask.model` — hard / soft sharing under the Trainer's loss contract;
* :mod:`~muppets.multitask.data` — alternating and joint (aligned) batches;
* :mod:`~muppets.multitask.run` — ``muppets multitask CONFIG.yaml`` (and MT-DNN's per-task
  fine-tuning afterwards).
"""

from muppets.multitask.config import MultitaskConfig, TaskEntry, load_config
from muppets.multitask.run import run
from muppets.multitask.samplers import TaskSchedule, task_probabilities
from muppets.multitask.weighting import TaskWeighting

__all__ = ["MultitaskConfig", "TaskEntry", "TaskSchedule", "TaskWeighting", "load_config", "run",
           "task_probabilities"]
