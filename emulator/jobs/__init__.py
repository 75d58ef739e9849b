"""Emulated batch/v1 Job controller behaviour (pure decisions first; the controller loop later)."""
