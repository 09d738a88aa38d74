"""The worker's web port: Prometheus metrics, the status page and its data, liveness and readiness."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import faust

from .context import WorkerContext
from .reports import Reporter

WEB_DIR = Path(__file__).parent / "web"
STATIC = {"uPlot.iife.min.js": "application/javascript", "uPlot.min.css": "text/css"}
STATUS_CACHE_S = 5.0


def add_pages(app: faust.App, ctx: WorkerContext, reporter: Reporter) -> None:
    """Register the worker's pages on its Faust app."""
    cache: dict[str, Any] = {"at": 0.0, "body": None}

    @app.page("/metrics")
    async def metrics_page(web, request):
        reporter.gauges()
        return web.bytes(ctx.metrics.render(), content_type="text/plain")  # Prometheus text format 0.0.4

    @app.page("/status")
    async def status_page(web, request):
        return web.html((WEB_DIR / "status.html").read_text(encoding="utf-8"))

    @app.page("/static/{name}")
    async def static_file(web, request, name: str):
        if name not in STATIC:  # a fixed list: request paths never reach the file system
            return web.text("not found", status=404)
        return web.bytes((WEB_DIR / "vendor" / name).read_bytes(), content_type=STATIC[name])

    @app.page("/status.json")
    async def status_json(web, request):
        """The group's status from Kafka (lag, owners, worker reports, history, clusters), cached."""
        from .status import page_status

        if cache["body"] is None or time.monotonic() - cache["at"] > STATUS_CACHE_S:
            body = await asyncio.get_running_loop().run_in_executor(None, page_status, ctx.settings, 10.0,
                                                                    ctx.settings.worker.display_name())
            cache.update(at=time.monotonic(), body=body)
        return web.json(cache["body"])

    @app.page("/healthz")
    async def healthz(web, request):
        """Liveness: fails once the stall watch fired (the process is on its way out)."""
        return web.json({"ok": ctx.stalled is None, "stalled": ctx.stalled}, status=200 if ctx.stalled is None else 503)

    @app.page("/ready")
    async def ready(web, request):
        """Readiness: not rebalancing or restoring tables."""
        rebalancing = bool(app.rebalancing)
        return web.json({"ready": not rebalancing}, status=503 if rebalancing else 200)
