"""LJ RuntimeKit `domain` layer."""
