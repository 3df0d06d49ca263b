"""Which task each step of alternating multi-task training trains.

Alternating training (one task's loss per optimizer step) draws the task of step ``s`` from
probabilities over the tasks' sizes ``n_k`` (training batches per epoch):

* ``proportional`` — ``p_k ∝ n_k``: every example is seen about equally often (large tasks
  dominate the updates);
* ``temperature`` — ``p_k ∝ n_k^(1/T)`` (T = 2 is the square-root sampler; T → ∞ uniform);
* ``uniform`` — ``p_k = 1/K``: small tasks are repeated many times per pass over a large one;
* ``annealed`` — Stickland & Murray (2019): ``p_k ∝ n_k^α`` with α falling linearly from 1 in
  the first epoch to ``anneal_min`` (their 0.2) in the last, so training starts proportional
  and ends close to uniform.

The draw of step ``s`` uses a generator seeded by ``(seed, s)`` alone, and a task's batches are
taken in its own epoch order (the ``i``-th time task ``k`` is drawn it trains its ``i``-th
batch), so :class:`TaskSchedule` is a pure function of the step: a resumed run draws exactly
what the uninterrupted run drew.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from muppets.errors import ConfigError

SAMPLERS = ("proportional", "temperature", "uniform", "annealed")


def sampling_exponent(sampler: str, temperature: float = 2.0, progress: float = 0.0,
                      anneal_min: float = 0.2) -> float:
    """α of ``p_k ∝ n_k^α``; ``progress`` in [0, 1] is how far training is (for ``annealed``).

    >>> sampling_exponent("temperature", temperature=2.0)
    0.5
    >>> sampling_exponent("annealed", progress=1.0)
    0.2
    """
    if sampler == "proportional":
        return 1.0
    if sampler == "temperature":
        if temperature <= 0:
            raise ConfigError(f"temperature={temperature} must be > 0")
        return 1.0 / temperature
    if sampler == "uniform":
        return 0.0
    if sampler == "annealed":
        return 1.0 - (1.0 - anneal_min) * min(max(progress, 0.0), 1.0)
    raise ConfigError(f"sampler {sampler!r}: expected one of {SAMPLERS}")


def task_probabilities(sizes: Sequence[float], sampler: str, temperature: float = 2.0,
                       progress: float = 0.0, anneal_min: float = 0.2) -> np.ndarray:
    """``(K,)`` probabilities of drawing each task, ``∝ sizes^α`` (:func:`sampling_exponent`).

    >>> task_probabilities([100, 400], "temperature").round(4).tolist()
    [0.3333, 0.6667]
    """
    n = np.asarray(sizes, dtype=np.float64)
    if n.ndim != 1 or len(n) == 0 or (n <= 0).any():
        raise ConfigError(f"task sizes must be positive, got {list(sizes)}")
    p = n ** sampling_exponent(sampler, temperature, progress, anneal_min)
    return p / p.sum()


class TaskSchedule:
    """The task and its batch index at every step of alternating training.

    Args:
        sizes: batches per epoch of each task.
        sampler, temperature, anneal_min: see :func:`task_probabilities`.
        total_steps: optimizer steps of the run; ``epochs`` of them make up the annealing
            schedule (epoch ``e`` of ``E`` uses progress ``e / (E - 1)``).
        seed: the draws' seed.
    """

    def __init__(self, sizes: Sequence[int], sampler: str, total_steps: int, epochs: int, seed: int,
                 temperature: float = 2.0, anneal_min: float = 0.2) -> None:
        if total_steps < 1 or epochs < 1:
            raise ConfigError(f"total_steps={total_steps} and epochs={epochs} must be >= 1")
        self.sizes, self.sampler = list(sizes), sampler
        self.total_steps, self.epochs, self.seed = total_steps, epochs, seed
        self.temperature, self.anneal_min = temperature, anneal_min
        task_probabilities(self.sizes, sampler, temperature, 0.0, anneal_min)  # validates
        self._counts = np.zeros(len(self.sizes), dtype=np.int64)  # draws of each task before _next
        self._next = 0

    def probabilities(self, step: int) -> np.ndarray:
        """``(K,)`` the drawing probabilities at ``step`` (they change only when annealing)."""
        epoch = min(step * self.epochs // self.total_steps, self.epochs - 1)
        progress = epoch / (self.epochs - 1) if self.epochs > 1 else 0.0
        return task_probabilities(self.sizes, self.sampler, self.temperature, progress, self.anneal_min)

    def task_at(self, step: int) -> int:
        """The task step ``step`` trains (a function of ``(seed, step)`` only)."""
        u = np.random.default_rng([self.seed, 104729, step]).random()
        cumulative = np.cumsum(self.probabilities(step))
        return int(min(np.searchsorted(cumulative, u, side="right"), len(self.sizes) - 1))

    def position(self, step: int) -> tuple[int, int]:
        """``(task, index)``: the task of ``step`` and how often it was drawn before (its batch
        index in its own epoch order). Sequential calls cost O(1); a jump back replays from 0."""
        if step < self._next:
            self._counts[:] = 0
            self._next = 0
        while self._next < step:
            self._counts[self.task_at(self._next)] += 1
            self._next += 1
        task = self.task_at(step)
        return task, int(self._counts[task])

    def counts(self, steps: int) -> np.ndarray:
        """``(K,)`` how many of the first ``steps`` steps train each task."""
        out = np.zeros(len(self.sizes), dtype=np.int64)
        for s in range(steps):
            out[self.task_at(s)] += 1
        return out
