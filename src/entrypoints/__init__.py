"""LJ RuntimeKit `entrypoints` layer."""
