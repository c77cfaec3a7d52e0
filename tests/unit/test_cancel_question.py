"""The async client's cancellation is a remote control command of ragline's own, registered the way
Celery documents, and Celery's ``revoke`` command is left as Celery ships it (no worker replaces it
at import time)."""

from __future__ import annotations

import celery.worker.control as control

from ragline.query import tasks
from ragline.shared.sdk.names import CONTROL_CANCEL_QUESTION


def test_the_cancellation_is_a_registered_control_command():
    assert control.Panel.data[CONTROL_CANCEL_QUESTION] is tasks.cancel_question
    assert control.Panel.meta[CONTROL_CANCEL_QUESTION].type == "control"


def test_celerys_revoke_is_not_replaced():
    assert control.Panel.data["revoke"] is control.revoke
