"""Reverse rules of shape and indexing functions: reshape ... getitem."""
