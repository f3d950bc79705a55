"""Applying stored events: the worker's loop (loop.py: claim, enrich, apply in batches)
and what it writes for an event that does not apply (settle.py: retry, dead letter,
ignore). `porteiro worker` and `serve`'s own worker run `Worker(runtime).run`."""

from porteiro.worker.loop import Worker as Worker
