"""Kubernetes-facing domain: protocol constants, API object value types, annotation codecs, translation."""
