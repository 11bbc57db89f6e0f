"""Best-effort notification (seed 001): deliver a topic's records to HTTP endpoints.

`Notifier` POSTs each record, retries on a schedule of increasing intervals, logs every
attempt to a delivery-log topic and sends what never got through to a dead-letter
topic; `NotificationQuery` (and `query_app`, its HTTP face) lets the receiver ask for
what it missed. At least once: receivers de-duplicate by ``X-Notification-Id``.
"""

from tidegate.patterns.notify.notifier import (
    Attempt,
    EndpointFor,
    Notifier,
    NotifierStats,
    http_post,
)
from tidegate.patterns.notify.query import NotificationQuery, query_app
from tidegate.patterns.notify.tracker import (
    DEFAULT_SCHEDULE_S,
    Notification,
    Outcome,
    Tracker,
    notification_id,
)

__all__ = [
    "DEFAULT_SCHEDULE_S",
    "Attempt",
    "EndpointFor",
    "Notification",
    "NotificationQuery",
    "Notifier",
    "NotifierStats",
    "Outcome",
    "Tracker",
    "http_post",
    "notification_id",
    "query_app",
]
