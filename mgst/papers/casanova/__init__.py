"""Casanova, Dufossé, Robert and Vivien's tightly-coupled iterations on volatile workers: estimates and heuristics."""
