"""The Kontinue queue bridge: turns queue-system evictions into Checkpoints and follows them."""
