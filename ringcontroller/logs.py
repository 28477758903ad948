"""structlog setup: one event name per line, JSON in production.

Standard-library loggers (aiohttp, kubernetes-asyncio, asyncio) and Python
warnings are routed through the same renderer, so every line the process
prints parses the same way (``logger`` names the library). Context (job, pod, epoch) is bound per item of work with
``structlog.contextvars`` or ``log.bind``.
"""

from __future__ import annotations

import logging
import sys

import structlog


def setup(*, fmt: str = "json", level: str = "info") -> None:
    """Configure structlog and the stdlib root logger; call once at start-up."""
    lvl = getattr(logging, level.upper())
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.format_exc_info,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(lvl)
    logging.captureWarnings(True)
