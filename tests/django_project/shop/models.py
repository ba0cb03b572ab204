"""An order, and whether its receipt went out (the receipt task sets it)."""

from __future__ import annotations

from django.db import models


class Order(models.Model):  # type: ignore[misc]  # Django is untyped here
    item = models.CharField(max_length=100)
    receipt_sent = models.BooleanField(default=False)
