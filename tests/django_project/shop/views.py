"""POST /orders/: the order and its receipt task in one atomic block."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from shop.models import Order
from shop.tasks import send_receipt


class PaymentFailed(Exception):
    pass


@require_POST  # type: ignore[untyped-decorator]  # Django is untyped here
def place_order(request: HttpRequest) -> JsonResponse:
    try:
        with transaction.atomic():
            order = Order.objects.create(item=request.POST["item"])
            result = send_receipt.enqueue(order.id)
            if request.POST.get("fail"):
                raise PaymentFailed  # the order and the task roll back together
    except PaymentFailed:
        return JsonResponse({"placed": False}, status=402)
    return JsonResponse({"placed": True, "order": order.id, "result_id": result.id,
                         "status": str(result.status)})
