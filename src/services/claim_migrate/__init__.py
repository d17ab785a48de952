"""The claim-migrate webhook's logic: classic GPU pods turned into claim pods (:mod:`.migrator`)."""
