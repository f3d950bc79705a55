"""The naive baseline (b): Flask under gunicorn, a new database connection per request."""
