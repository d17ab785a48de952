"""Fragmentation Gradient Descent (FGD) and its variants; see README.md beside this file."""
