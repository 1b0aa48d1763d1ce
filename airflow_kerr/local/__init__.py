"""The embedded development stack: broker launcher, Kafka Connect stand-in, the kerr CLI."""
