"""Transfer to tasks: fine-tuning (``finetune``), its features and batching, and prediction.

Data flows one way: ``features`` (examples -> token ids + labels) -> ``batching``
(length-bucketed, padded batches; the Trainer's StepData) -> ``predict`` (logits -> labels,
tags per word, answer spans; :class:`Predictor`) -> ``finetune`` (training, model selection,
metrics, seeds).
"""

from muppets.transfer.features import Feature, FeatureOptions, make_features
from muppets.transfer.predict import Predictor, SpanOptions

__all__ = ["Feature", "FeatureOptions", "Predictor", "SpanOptions", "make_features"]
