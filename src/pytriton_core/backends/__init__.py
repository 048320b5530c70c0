"""Backends: one framework each, behind the contract in ``base``."""
