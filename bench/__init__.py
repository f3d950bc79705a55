"""The side-by-side benchmark of `make bench` (see docs/performance.md)."""
