"""LJ RuntimeKit `ports` layer."""
