"""placeholder"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run_from_args(args: argparse.Namespace) -> int:
    return 2
