"""Triggers: the async twins of the sensors and waits, for deferrable mode."""
