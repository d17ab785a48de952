"""``ljrk simulate``: trace replay of the scheduling policies (entry: :func:`entrypoints.simulate.__main__.main`)."""
