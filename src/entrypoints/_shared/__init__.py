"""Pieces every entrypoint shares: the ``main`` outline, exit codes and ``SettingsError`` (:mod:`.command`), the
parser (:mod:`.cli`), signals, the serving loop, the probe listener and a replica's threads (:mod:`.threads`)."""
