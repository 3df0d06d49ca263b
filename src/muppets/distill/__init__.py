"""Knowledge distillation: a fine-tuned teacher taught to a smaller student (``muppets distill``).

The teacher (any fine-tuned task directory: classify, pair, regress, tag, span, choice) labels
a transfer set — its task's training text, unlabeled text, augmented copies — and the student
learns its soft targets (Hinton et al. 2015; Sanh et al. 2019), mixed with the gold labels
where they exist, and optionally its hidden states and attention (Jiao et al. 2020, TinyBERT;
Wang et al. 2020, MiniLM). Students: the teacher with layers dropped, any BERT size, a BiLSTM
(Tang et al. 2019), or a pretrained encoder with the teacher's vocabulary.

- :mod:`~muppets.distill.config`: the settings (:class:`DistillConfig`);
- :mod:`~muppets.distill.students`: teacher and student;
- :mod:`~muppets.distill.transfer_set`: the text the teacher labels;
- :mod:`~muppets.distill.losses`: the loss terms;
- :mod:`~muppets.distill.model`: the student under the Trainer's contract, its batches;
- :mod:`~muppets.distill.run`: the run (:func:`run`, :func:`run_seeds`).

Nothing is imported here, so ``muppets --help`` (which adds :mod:`~muppets.distill.cli`) stays
free of torch.
"""
