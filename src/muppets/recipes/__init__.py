"""End-to-end recipes: configs that tie tokenizer, corpus, model and trainer together."""
