"""Loops and helpers the services share: informers, leader election, publishing on API objects, structured
log fields."""
