"""Intrinsic evaluations of representations (word similarity, analogies)."""
