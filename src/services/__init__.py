"""Application services: the logic each deployed component runs (scheduling cycles and commits, the device plugin's
allocation and release, the exporter's collection, the controller's reconcile loop, the Runtime's state machine, the
shared informer and leader loops). They drive :mod:`domain` through :mod:`ports` only: no adapter and no framework is
imported here, and the entry points wire adapters in."""
