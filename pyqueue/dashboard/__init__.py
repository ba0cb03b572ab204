"""The jobq web dashboard (``pip install 'jobq[dashboard]'``): server-rendered
pages of every queue, job, schedule and worker, operator actions through
jobq's SQL functions, and the security around them.

Modules: ``app`` (:func:`create_app`, routes, error pages), ``pages`` (the
GET pages), ``actions`` (the POST forms), ``reads`` (the SQL, views only),
``chart`` (the throughput SVG), ``rendering`` (Jinja2, flash messages),
``security`` (auth, CSRF, headers), ``database`` (the connection pool);
``templates/`` and ``static/`` hold the HTML, CSS and JS, all shipped in the
package (no CDN, no build step). ``pyqueue dashboard`` serves it with
uvicorn. Never imported by ``import pyqueue`` or a worker.
"""

from __future__ import annotations

from pyqueue.dashboard.app import create_app
from pyqueue.dashboard.security import BasicAuth, TokenAuth, hash_password, verify_password

__all__ = ["BasicAuth", "TokenAuth", "create_app", "hash_password", "verify_password"]
