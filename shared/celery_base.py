"""The Celery app class of every ragline producer: the worker app and the chat backend's client.

Light on purpose (Celery and the contracts only): ``ragline.shared.client`` must not import worker code.
"""

from __future__ import annotations

from celery import Celery

from ragline.shared.contracts import payload_summary


class RaglineCelery(Celery):
    def send_task(self, name, args=None, kwargs=None, **options):
        """Every task carries a redacted ``argsrepr`` (see ``contracts.payload_summary``), not
        Celery's repr of the payload, into its headers, task events and Flower."""
        options.setdefault("argsrepr", payload_summary(args or ()))
        options.setdefault("kwargsrepr", "{}" if not kwargs else f"<{len(kwargs)} kwargs>")
        return super().send_task(name, args, kwargs, **options)
