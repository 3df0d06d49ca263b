"""Looking inside models: layer-weight plots (:mod:`~muppets.analysis.layer_weights`), the
polysemy measurement of static vs contextual vectors (:mod:`~muppets.analysis.polysemy`), and
attention — capture and analyses (:mod:`~muppets.analysis.attention`), the offline HTML page
(:mod:`~muppets.analysis.attention_page`), PNGs (:mod:`~muppets.analysis.attention_plots`) and the
``muppets attention`` command (:mod:`~muppets.analysis.attention_cli`), and probing — per-layer and
scalar-mix probes with random-encoder and control-task baselines (:mod:`~muppets.analysis.probing`),
the structural probe (:mod:`~muppets.analysis.structural_probe`) and ``muppets probe``
(:mod:`~muppets.analysis.probe_cli`)."""

# How layers are numbered in every analysis (probe, embed, features, polysemy, attention), as in
# transformers' ``hidden_states``: 0 is the embeddings, layer l the output of the l-th transformer
# layer. Attention exists only in the transformer layers, so its layers run from this number.
FIRST_LAYER = 1
