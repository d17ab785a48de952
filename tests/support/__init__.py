"""Helpers the test suites share: polling (:mod:`.polling`) and builders of the objects tests feed the code.

``tests`` is on pytest's ``pythonpath`` (pyproject), so every suite imports them as ``support.<module>``.
"""
