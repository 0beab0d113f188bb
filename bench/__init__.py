"""goatbeat's benchmarks, side by side with celery beat and django-celery-beat.

Run everything with ``./dev bench`` (which runs ``python -m bench``); ``python -m bench --quick``
runs a reduced version in a few minutes. Each ``bench_*.py`` module measures one thing and
says in its docstring how; ``bench.__main__`` starts the servers, runs them, prints a Markdown
table and writes ``docs/benchmarks.md`` and ``docs/benchmarks.png``. Nothing here is a test:
speed is measured, never asserted.
"""
