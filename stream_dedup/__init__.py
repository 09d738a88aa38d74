"""stream-dedup: exact and near-duplicate detection for live Kafka streams.

    from stream_dedup import Deduper
    d = Deduper()
    d.check({"id": "a", "text": "..."}).verdict   # "unique" / "duplicate"
"""
from __future__ import annotations

__version__ = "0.1.0"

from .api import Deduper  # noqa: E402
from .core.document import Rejected  # noqa: E402
from .core.verdict import Cluster, Verdict  # noqa: E402

__all__ = ["Cluster", "Deduper", "Rejected", "Verdict", "__version__"]
