"""Pieces shared by several entrypoints (leader election, list+watch loops)."""
