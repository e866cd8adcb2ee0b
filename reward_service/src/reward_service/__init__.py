"""Reward service."""
