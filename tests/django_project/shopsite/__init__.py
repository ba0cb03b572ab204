"""A small shop: orders, a receipt task and a payment task run by jobq (tests/test_django.py)."""
