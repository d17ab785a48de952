"""LJ RuntimeKit `adapters` layer."""
