"""Looking inside models: layer-weight plots (:mod:`~muppets.analysis.layer_weights`), the
polysemy measurement of static vs contextual vectors (:mod:`~muppets.analysis.polysemy`), and
attention — capture and analyses (:mod:`~muppets.analysis.attention`), the offline HTML page
(:mod:`~muppets.analysis.attention_page`), PNGs (:mod:`~muppets.analysis.attention_plots`) and the
``muppets attention`` command (:mod:`~muppets.analysis.attention_cli`)."""
