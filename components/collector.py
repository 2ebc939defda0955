"""Garbage-collector settings for stacks of thousands of resources.

A Pulumi program keeps every resource, its Outputs and their futures alive until it ends, so its
heap only grows, and CPython's default thresholds re-scan that whole heap again and again: about a
third of a 1000-node preview went to full collections. The objects the imports built are frozen
out of collection and young objects are collected less often; reference cycles are still freed.
"""

from __future__ import annotations

import gc

# Allocations between young collections, and the generation multipliers (CPython: 700, 10, 10).
THRESHOLDS = (20_000, 50, 50)


def tune_collector() -> None:
    """Call once, after the program's imports."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
