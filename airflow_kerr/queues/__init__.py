"""Queue providers for common.messaging's ``MessageQueueTrigger``: ``scheme="kerr+dlq"`` and ``"kerr+tolerance"``."""
