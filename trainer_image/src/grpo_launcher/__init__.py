"""Trainer launcher."""
