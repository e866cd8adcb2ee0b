"""torch.version of the GPU stand-in (see torch/__init__.py)."""

cuda = "13.0"
