"""Offline AIME-style evaluation against an SGLang server (``python -m grpo_launcher evaluate``)."""
