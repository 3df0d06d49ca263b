"""Model families muppets reads and writes, registered in one table
(:mod:`muppets.families.registry`). A next family is one module here, imported below.

==============  ===============================  ===========================================
family          model_type (config.json)          why it maps at low cost
==============  ===============================  ===========================================
``bert``        bert, muppets-bert-preln          the reference encoder
``roberta``     roberta, xlm-roberta, camembert   BERT + positions from pad+1, one token type
``distilbert``  distilbert                        BERT blocks under other names, no segments
``electra``     electra                           BERT + an embedding projection (E ≠ H)
``gpt``         gpt2, openai-gpt                  the causal family (its own backbone)
``bilstm``      muppets-bilstm                    task models only: the distillation student
==============  ===============================  ===========================================

ALBERT (shared layers, factorised embeddings, SOP) is left for later: its one shared block and
its own MLM/SOP heads need a backbone flag more than a key map.
"""

from muppets.families import bert, bilstm, distilbert, electra, gpt, roberta  # noqa: F401  (registers them)
from muppets.families.registry import (DEFAULT_MODEL_TYPE, Family, families, for_model_type, get, is_family,
                                       of_directory, of_model, register)

__all__ = ["DEFAULT_MODEL_TYPE", "Family", "families", "for_model_type", "get", "is_family", "of_directory",
           "of_model", "register"]
