"""Settings of the test shop: the database from DATABASE_URL, jobq as the Tasks backend."""

from __future__ import annotations

import os
from importlib.util import find_spec

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ["DATABASE_URL"])

SECRET_KEY = "tests-only"  # a throwaway project
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
ROOT_URLCONF = "shopsite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Django 6 has django.tasks; Django 5.2 takes the django-tasks backport as an app.
INSTALLED_APPS = [
    *([] if find_spec("django.tasks") else ["django_tasks"]),
    "pyqueue.django",
    "shop",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.get("dbname", ""),
        "USER": _db.get("user", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
    },
}
TASKS = {
    "default": {
        "BACKEND": "pyqueue.django.JobqBackend",
        "QUEUES": ["emails", "payments", "expect"],
        "OPTIONS": {"MAX_ATTEMPTS": 2},
    },
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
