"""Helpers the tests share, each defined once: servers and ports, waiting, signed Standard
Webhooks requests, real `porteiro` processes, the databases behind a store URL.

Fixtures stay in the conftest.py files (pytest finds them there); plain functions live
here, so a test module imports them instead of importing another test module.
"""
