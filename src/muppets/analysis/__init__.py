"""Looking inside models: layer-weight plots (:mod:`~muppets.analysis.layer_weights`) and the
polysemy measurement of static vs contextual vectors (:mod:`~muppets.analysis.polysemy`)."""
