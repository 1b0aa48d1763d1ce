"""Notifiers for tolerance breaches."""
