"""The shop's tasks: a receipt (uses the database, returns a value) and a
payment that always fails."""

from __future__ import annotations

from typing import Any

from pyqueue.django._tasks import task_decorator as task
from shop.models import Order


class PaymentDeclined(Exception):
    """The card was declined."""


@task(queue_name="emails")  # type: ignore[untyped-decorator]  # Django is untyped here
def send_receipt(order_id: int) -> dict[str, Any]:
    order = Order.objects.get(id=order_id)
    order.receipt_sent = True
    order.save(update_fields=["receipt_sent"])
    return {"order": order_id, "item": order.item}


@task(queue_name="payments", priority=10)  # type: ignore[untyped-decorator]
def charge(order_id: int) -> None:
    raise PaymentDeclined(f"card of order {order_id} declined")
