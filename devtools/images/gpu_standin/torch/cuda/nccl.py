"""torch.cuda.nccl of the GPU stand-in (see torch/__init__.py)."""


def version() -> tuple[int, int, int]:
    return (2, 27, 3)
