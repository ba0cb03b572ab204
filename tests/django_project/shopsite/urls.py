"""The shop's one URL."""

from __future__ import annotations

from django.urls import path
from shop.views import place_order

urlpatterns = [path("orders/", place_order)]
